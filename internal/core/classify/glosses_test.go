package classify

import (
	"slices"
	"testing"
)

// A task in another language is read with the English words its glosses stand for: their keywords
// signal, and the task is classified as the English one would be.
func TestGlossesReadAsEnglish(t *testing.T) {
	c := classifier(t)
	for _, tc := range []struct {
		desc, task string
		want       Category
		keyword    string
	}{
		{"German, a word's inflected form", "Übersetze bitte diesen Absatz ins Englische, er ist für unsere Kunden in Kanada.", Translation, "translate"},
		{"Russian", "Сократи этот текст до трёх предложений.", Summarization, "summarize"},
		{"Chinese, a pair of characters", "请用通俗的语言解释一下区块链是怎么工作的。", Explanation, "explain"},
		{"Japanese, in kanji between kana", "この二つのデータベースを比較して、どちらが私たちに合うか教えてください。", Comparison, "compare"},
		{"Korean, syllables of one word", "다음 분기 출시 계획을 주 단위로 세워 주세요.", Planning, "plan"},
		{"Vietnamese, a pair of syllables", "Hãy dịch đoạn văn này sang tiếng Anh giúp tôi.", Translation, "translate"},
		{"Spanish, an ambiguous word left out, its unambiguous form read", "Resúmeme este informe en cinco puntos.", Summarization, "summarize"},
		{"Hindi, a word whose vowels are marks", "कृपया इस लेख का सारांश पाँच बिंदुओं में लिखें।", Summarization, "summarize"},
		{"Arabic", "ترجم هذه الرسالة إلى الإنجليزية من فضلك.", Translation, "translate"},
		{"Persian", "تفاوت بین این دو پایگاه داده را با هم مقایسه کن.", Comparison, "compare"},
	} {
		r := c.Classify(tc.task)
		if !slices.Contains(r.Signals, Signal{Category: tc.want, Keyword: tc.keyword}) {
			t.Errorf("%s: signals %v, want %s's %q", tc.desc, r.Signals, tc.want, tc.keyword)
		}
		if r.Category != tc.want {
			t.Errorf("%s: %s (%.2f), want %s", tc.desc, r.Category, r.Confidence, tc.want)
		}
	}
}

// Characters of scripts written without spaces are words of their own, so that a gloss of two of
// them is found inside a run, and the run is not one long word no other task shares.
func TestCharactersAreWords(t *testing.T) {
	x := newExtractor()
	x.features("请把下面这段话翻译成英文", nil, 1<<16)
	want, err := newExtractor().phraseHash("翻译")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(x.hashes, want) {
		t.Errorf("the pair 翻译 is not among the words and pairs of a sentence holding it")
	}
	if got := len(x.hashes); got != 2*12-1 { // 12 characters, 11 pairs
		t.Errorf("%d words and pairs, want 23", got)
	}
}

// Vowel signs are part of their word: a Devanagari word is one word, not its fragments.
func TestMarksAreInWords(t *testing.T) {
	x := newExtractor()
	x.features("समझाइए", nil, 1<<16)
	if len(x.hashes) != 1 {
		t.Errorf("one Hindi word read as %d words and pairs", len(x.hashes))
	}
}
