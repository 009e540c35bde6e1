package classify

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// The shipped weights were trained from this build's data with the shipped options: after a change to
// the examples, the keywords or the features, make classifier must be run again.
func TestShippedWeightsAreCurrent(t *testing.T) {
	train, _, err := Dataset()
	if err != nil {
		t.Fatal(err)
	}
	m, err := shipped()
	if err != nil {
		t.Fatal(err)
	}
	if want := Digest(train, TrainOptions{}); m.Digest != want {
		t.Fatalf("the shipped weights were trained from other data or options (digest %x, want %x): run make classifier", m.Digest, want)
	}
	if len(shippedWeights) > 5<<20 {
		t.Errorf("weights %d bytes, over 5 MB", len(shippedWeights))
	}
}

// Training is seeded: the same examples and options give the same bytes.
func TestTrainingIsDeterministic(t *testing.T) {
	train, _, err := Dataset()
	if err != nil {
		t.Fatal(err)
	}
	var subset []Example
	for i := 0; i < len(train); i += 10 {
		subset = append(subset, train[i])
	}
	opts := TrainOptions{Dim: 1 << 12, Epochs: 2, Folds: 2, Seed: 3}
	var files [2][]byte
	for i := range files {
		m, err := TrainModel(subset, opts)
		if err != nil {
			t.Fatal(err)
		}
		if files[i], err = m.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("two trainings on the same examples differ")
	}
	other, err := TrainModel(subset, TrainOptions{Dim: 1 << 12, Epochs: 2, Folds: 2, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := other.MarshalBinary(); bytes.Equal(b, files[0]) {
		t.Fatal("another seed gave the same weights")
	}
}

func TestModelRoundTrip(t *testing.T) {
	m := &Model{Dim: 3, Categories: Categories, Weights: make([]int16, 3*len(Categories)), Scale: 0.01, Bias: make([]float32, len(Categories)), Temperature: 0.75, Digest: 42}
	for i := range m.Weights {
		m.Weights[i] = int16(i%7) - 3
	}
	m.Bias[2] = 1.5
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Model
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.Dim != 3 || got.Temperature != 0.75 || got.Digest != 42 || got.Bias[2] != 1.5 || got.Scale != 0.01 ||
		!slices.Equal(got.Categories, Categories) || !slices.Equal(got.Weights, m.Weights) {
		t.Fatalf("decoded %+v", got)
	}
}

func TestMalformedWeightsAreRefused(t *testing.T) {
	good, err := (&Model{Dim: 2, Categories: Categories, Weights: make([]int16, 2*len(Categories)), Scale: 1, Bias: make([]float32, len(Categories)), Temperature: 1}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc string
		data []byte
	}{
		{"empty", nil},
		{"another format", []byte("PK\x03\x04 not weights at all")},
		{"cut short", good[:len(good)-3]},
		{"bytes past the weights", append(append([]byte(nil), good...), 0)},
		{"another version", append(append([]byte(modelMagic), 9, 0, 0, 0), good[8:]...)},
	} {
		var m Model
		if err := m.UnmarshalBinary(tc.data); !errors.Is(err, ErrModelFormat) {
			t.Errorf("%s: %v, want ErrModelFormat", tc.desc, err)
		}
	}
	if _, err := WithModel(&Model{Dim: 1, Categories: Categories[:3], Weights: make([]int16, 3), Scale: 1, Bias: make([]float32, 3), Temperature: 1}, Options{}); !errors.Is(err, ErrModelFormat) {
		t.Errorf("a model of other categories: %v, want ErrModelFormat", err)
	}
}
