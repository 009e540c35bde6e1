package classify

// glosses are the words of other languages that ask for what an English word asks for, by that English
// word: the model is trained mostly on English tasks, so a task that says "übersetze", "переведи" or
// "翻译" is read as if it also said "translate", and what the model learned of the English word
// carries over. Each gloss is one word or two (in Chinese and Japanese two characters, each a word,
// see charWord), as the task spells it in lower case; a word that is also English is left out, for the
// English word is read anyway. A gloss that is ambiguous in its own language (Spanish "resume" is also
// English, Vietnamese "dịch" alone also means "service") is given only in the pairs that are not.
var glosses = map[string][]string{
	"translate": {
		"übersetze", "übersetzen", "übersetzt", "übersetzung", "traduis", "traduire", "traduisez", "traduction",
		"traduce", "traducir", "traduzca", "traducción", "tradúceme", "traduza", "traduzir", "tradução",
		"traduci", "tradurre", "traduzione", "traducimi", "vertaal", "vertalen", "vertaling", "översätt",
		"översätta", "översättning", "oversæt", "oversett", "przetłumacz", "przetłumaczyć", "tłumaczenie",
		"přelož", "přeložit", "переведи", "перевести", "переведите", "перевод", "переклади", "перекласти",
		"переклад", "çevir", "tercüme", "dịch sang", "bản dịch", "hãy dịch", "terjemahkan", "terjemahan",
		"menerjemahkan", "翻译", "翻譯", "译成", "譯成", "翻訳", "英訳", "和訳", "번역",
	},
	"english": {
		"englisch", "englische", "englischen", "anglais", "inglés", "inglês", "inglese", "engels", "engelska",
		"angielski", "angielskiego", "anglicky", "английский", "английском", "английского", "англійську",
		"англійською", "ingilizce", "tiếng anh", "inggris", "英文", "英语", "英語", "영어",
	},
	"summarize": {
		"zusammenfassen", "zusammenfassung", "kürze", "résume", "résumer", "résumez", "synthèse",
		"synthétise", "resumir", "resúmeme", "resumen", "resuma", "resumo", "sintetize", "riassumi",
		"riassumere", "riassunto", "sintetizza", "samenvatten", "samenvatting", "sammanfatta",
		"sammanfattning", "streść", "streszczenie", "podsumuj", "podsumowanie", "shrnutí", "сократи",
		"сократить", "кратко", "резюмируй", "перескажи", "выжимка", "підсумуй", "стисло", "özetle",
		"özet", "tóm tắt", "ringkas", "ringkaskan", "ringkasan", "rangkum", "rangkuman", "总结", "總結",
		"摘要", "概括", "归纳", "要約", "要点", "概要", "요약",
	},
	"explain": {
		"erkläre", "erklären", "erklärung", "explique", "expliquer", "expliquez", "explication", "explica",
		"explicar", "explícame", "explicación", "explicação", "spiega", "spiegare", "spiegami", "spiegazione",
		"uitleggen", "uitleg", "förklara", "förklaring", "wyjaśnij", "wyjaśnić", "wytłumacz", "vysvětli",
		"объясни", "объяснить", "объясните", "объяснение", "поясни", "поясніть", "пояснення", "açıkla",
		"açıklama", "giải thích", "jelaskan", "penjelasan", "解释", "解釋", "讲解", "原理", "説明", "解説",
		"仕組", "설명", "원리",
	},
	"compare": {
		"vergleiche", "vergleichen", "vergleich", "comparer", "comparez", "comparaison", "compara", "comparar",
		"compárame", "comparación", "comparação", "confronta", "confrontare", "confronto", "vergelijk",
		"vergelijken", "jämför", "jämförelse", "porównaj", "porównanie", "porovnej", "сравни", "сравнить",
		"сравнение", "порівняй", "порівняння", "karşılaştır", "karşılaştırma", "so sánh", "bandingkan",
		"perbandingan", "比较", "比較", "对比", "對比", "비교",
	},
	"difference": {
		"unterschied", "unterschiede", "différence", "différences", "diferencia", "diferencias", "diferença",
		"differenza", "verschil", "skillnad", "różnica", "rozdíl", "разница", "отличие", "отличается",
		"різниця", "fark", "khác nhau", "perbedaan", "区别", "區別", "差异", "違い", "차이",
	},
	"plan": {
		"planen", "zeitplan", "planung", "planifier", "planifie", "calendrier", "planifica", "planificar",
		"cronograma", "planificación", "planeje", "planejar", "planejamento", "pianifica", "pianificare",
		"pianificazione", "plannen", "planera", "planering", "tidsplan", "zaplanuj", "harmonogram",
		"naplánuj", "спланируй", "спланировать", "планирование", "распиши", "сплануй", "planla", "kế hoạch",
		"rencanakan", "rencana", "jadwal", "计划", "計劃", "规划", "日程", "計画", "予定", "準備", "段取", "계획", "일정",
	},
	"why": {
		"warum", "wieso", "pourquoi", "por qué", "por quê", "perché", "waarom", "varför", "dlaczego", "proč",
		"почему", "зачем", "чому", "neden", "niçin", "tại sao", "vì sao", "mengapa", "kenapa", "为何", "為何",
		"なぜ", "왜",
	},
	"ideas": {
		"ideen", "vorschläge", "idées", "ideias", "idee", "ideeën", "idéer", "pomysły", "pomysłów", "nápady",
		"идеи", "идей", "придумай", "ідеї", "ідей", "fikir", "fikirler", "ý tưởng", "gagasan", "想法", "点子",
		"點子", "创意", "創意", "主意", "イデ", "디어",
	},
	"implement": {
		"implementiere", "implementieren", "implémente", "implémenter", "implementa", "implementar",
		"implementare", "implementeer", "implementera", "zaimplementuj", "implementuj",
		"реализуй", "реализовать", "реалізуй", "uygula", "implementasikan", "实现", "實現", "実装", "구현",
	},
	"function": {
		"funktion", "fonction", "función", "função", "funzione", "functie", "funkcja", "funkcję", "funkci",
		"функцию", "функция", "функцію", "fonksiyon", "fungsi", "函数", "函數", "関数", "함수",
	},
	"write": {
		"schreibe", "schreib", "écris", "écrire", "escribe", "escribir", "escreva", "escrever", "scrivi",
		"scrivere", "schrijf", "skriv", "napisz", "napiš", "напиши", "написать", "напишіть", "yaz", "viết",
		"tuliskan", "buatkan", "编写", "編寫", "写一", "寫一", "書い", "작성",
	},
	"error": {
		"fehler", "fehlermeldung", "erreur", "erreurs", "fallo", "erro", "foutmelding",
		"felmeddelande", "błąd", "błędu", "ошибка", "ошибку", "ошибки", "помилка", "помилку",
		"hata", "hatası", "lỗi", "kesalahan", "错误", "錯誤", "报错", "異常", "异常", "エラ", "例外", "오류", "에러",
	},
	"bug": {
		"absturz", "stürzt", "bogue", "falla", "баг", "падает", "崩溃", "不具", "バグ", "버그",
	},
	"outage": {
		"störung", "ausfall", "panne", "caída", "avería", "queda", "guasto", "störning", "awaria",
		"сбой", "збій", "kesinti", "sự cố", "gangguan", "故障", "宕机", "障害", "장애",
	},
	"troubleshoot": {
		"fehlerbehebung", "dépannage", "diagnostica", "diagnosticar", "diagnosticare", "диагностика",
		"排查", "원인",
	},
	"production": {
		"produktion", "produktivsystem", "producción", "produção", "produzione", "productie", "produkcja",
		"продакшн", "продакшене", "прод", "生产", "本番", "운영",
	},
	"configure": {
		"konfiguriere", "konfigurieren", "konfiguration", "einrichten", "configurer", "configura",
		"configurar", "configuración", "configuração", "configurare", "configurazione", "configureer",
		"konfigurera", "skonfiguruj", "konfiguracja", "настрой", "настроить", "настройка", "конфигурация",
		"налаштуй", "налаштування", "yapılandır", "cấu hình", "konfigurasi", "配置", "设置", "設定", "構成", "설정",
	},
	"settings": {
		"einstellungen", "paramètres", "ajustes", "impostazioni", "instellingen", "inställningar",
		"ustawienia", "настройки", "ayarlar", "pengaturan",
	},
	"refactor": {
		"umschreiben", "refaktoriere", "refaktorisieren", "refactoriser", "refactorise", "réécris", "réécrire",
		"refactoriza", "refactorizar", "reescribe", "reescribir", "refatore", "refatorar", "reescreva",
		"rifattorizza", "riscrivi", "riscrivere", "herschrijf", "refaktorera", "skriv om", "przepisz",
		"zrefaktoryzuj", "перепиши", "переписать", "рефакторинг", "отрефактори", "yeniden yaz", "重构", "重構",
		"重写", "重寫", "리팩",
	},
	"migrate": {
		"migrieren", "migriere", "umstellen", "umstellung", "portieren", "migrer", "migrez", "migrar",
		"migración", "migração", "migrare", "migrazione", "migreren", "migratie", "migrera", "migrering",
		"migracja", "zmigruj", "миграция", "мигрировать", "мигрируй", "міграція", "taşı", "geçiş",
		"di chuyển", "migrasi", "迁移", "遷移", "移行", "전환",
	},
	"documentation": {
		"dokumentation", "dokumentiere", "anleitung", "hilfeseite", "documente", "documenter", "documentación",
		"documenta", "documentar", "documentação", "documentazione", "documentatie", "handleiding",
		"hjälpsidan", "hjälpsida", "användarguide", "dokumentacja", "dokumentację", "instrukcja",
		"документация", "документацию", "инструкция", "инструкцию", "документація", "dokümantasyon",
		"kılavuz", "tài liệu", "dokumentasi", "文档", "文檔", "ドキ", "マニ", "문서",
	},
	"review": {
		"überprüfe", "überprüfen", "durchsehen", "relis", "relire", "revisa", "revisar", "revisión",
		"revisão", "revisiona", "rivedi", "revisione", "beoordeel", "granska", "granskning",
		"przejrzyj", "ревью", "просмотри", "incele", "审查", "審查", "审核", "评审", "レビ", "리뷰", "검토",
	},
	"security": {
		"sicherheit", "sécurité", "seguridad", "segurança", "sicurezza", "beveiliging", "säkerhet",
		"bezpieczeństwo", "bezpečnost", "безопасность", "безпека", "güvenlik", "bảo mật", "keamanan",
		"安全", "セキ", "보안",
	},
	"vulnerability": {
		"schwachstelle", "sicherheitslücke", "vulnérabilité", "faille", "vulnerabilidad", "vulnerabilidade",
		"vulnerabilità", "kwetsbaarheid", "sårbarhet", "podatność", "уязвимость", "уязвимости", "вразливість",
		"zafiyet", "lỗ hổng", "kerentanan", "漏洞", "脆弱", "취약",
	},
	"test": {
		"testen", "pruebas", "prueba", "testar", "testare",
		"testów", "przetestuj", "тест", "тесты", "тестов", "протестируй", "тести", "testleri", "kiểm thử",
		"pengujian", "测试", "測試", "テス", "試験", "테스",
	},
	"research": {
		"forschung", "studien", "recherche", "investigación", "pesquisa", "ricerca", "onderzoek", "forskning",
		"badania", "badań", "výzkum", "исследования", "исследований", "исследование", "дослідження",
		"araştırma", "nghiên cứu", "penelitian", "研究", "文献", "文獻", "论文", "論文", "연구", "논문",
	},
	"classify": {
		"klassifiziere", "klassifizieren", "kategorisiere", "kategorisieren", "einordnen", "classer",
		"classifie", "catégorise", "clasifica", "clasificar", "categoriza", "classifique", "classificar",
		"classifica", "classificare", "categorizza", "classificeer", "categoriseer",
		"klassificera", "kategorisera", "sklasyfikuj", "skategoryzuj", "klasifikuj", "классифицируй",
		"классифицировать", "распредели", "класифікуй", "sınıflandır", "phân loại", "klasifikasikan",
		"kelompokkan", "分类", "分類", "类目", "類目", "类别", "類別", "분류",
	},
	"category": {
		"kategorie", "kategorien", "catégorie", "catégories", "categoría", "categorías", "categoria",
		"categorias", "categorie", "kategori", "kategorii", "категорию", "категории", "категорія",
		"danh mục", "カテ",
	},
	"evaluate": {
		"bewerte", "bewerten", "bewertung", "beurteile", "évalue", "évaluer", "évaluation", "evalúa",
		"evaluar", "evaluación", "califica", "avalie", "avaliar", "avaliação", "valuta", "valutare",
		"valutazione", "evalueer", "bedöm", "utvärdera", "oceń", "ocenić", "ocena", "ohodnoť", "оцени",
		"оценить", "оценка", "оцените", "оціни", "değerlendir", "puanla", "đánh giá", "nilai", "evaluasi",
		"评估", "評估", "评价", "評價", "评分", "打分", "評価", "採点", "평가", "채점",
	},
	"analyze": {
		"analysiere", "analysieren", "analyser", "analiza", "analizar", "analise", "analisar", "analizza",
		"analizzare", "analyseer", "analysera", "przeanalizuj", "analyzuj", "проанализируй",
		"проанализировать", "проаналізуй", "analiz", "phân tích", "analisis", "分析", "분석",
	},
	"statistics": {
		"statistik", "statistiques", "estadísticas", "estatísticas", "statistiche", "statistieken",
		"statystyki", "статистика", "статистику", "istatistik", "thống kê", "statistika", "统计", "統計", "통계",
	},
	"data": {
		"daten", "données", "datos", "dados", "dati", "gegevens", "данные", "дані", "veri",
		"dữ liệu", "数据", "數據", "デー",
	},
	"architecture": {
		"architektur", "arquitectura", "arquitetura", "architettura", "architectuur", "arkitektur",
		"architektura", "architekturę", "архитектура", "архитектуру", "архітектура", "mimari", "kiến trúc",
		"arsitektur", "架构", "架構", "아키",
	},
	"design": {
		"entwirf", "entwerfen", "concevoir", "conçois", "diseña", "diseñar", "projete", "progetta",
		"progettare", "ontwerp", "ontwerpen", "zaprojektuj", "спроектируй", "спроектировать", "设计", "設計",
		"설계",
	},
}
