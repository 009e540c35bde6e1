package classify

// Category is one of the task categories: the specification's 15 primary ones and the 7 secondary
// ones that have blueprints of their own.
type Category string

// The primary categories. General is also the answer when the classifier is unsure.
const (
	CodeReview      Category = "code_review"
	SecurityAudit   Category = "security_audit"
	Architecture    Category = "architecture"
	Implementation  Category = "implementation"
	Refactoring     Category = "refactoring"
	Debugging       Category = "debugging"
	Testing         Category = "testing"
	Documentation   Category = "documentation"
	Research        Category = "research"
	Classification  Category = "classification"
	Summarization   Category = "summarization"
	Planning        Category = "planning"
	Evaluation      Category = "evaluation"
	Troubleshooting Category = "troubleshooting"
	General         Category = "general"
	Translation     Category = "translation"
	DataAnalysis    Category = "data_analysis"
	Brainstorming   Category = "brainstorming"
	Explanation     Category = "explanation"
	Comparison      Category = "comparison"
	Configuration   Category = "configuration"
	Migration       Category = "migration"
)

// Categories lists the categories in a fixed order: the primary ones, then the secondary ones.
var Categories = []Category{
	CodeReview, SecurityAudit, Architecture, Implementation, Refactoring, Debugging, Testing,
	Documentation, Research, Classification, Summarization, Planning, Evaluation, Troubleshooting, General,
	Translation, DataAnalysis, Brainstorming, Explanation, Comparison, Configuration, Migration,
}

// Priority is how urgently a category's tasks are treated.
type Priority string

// Priorities.
const (
	Critical Priority = "critical"
	High     Priority = "high"
	Medium   Priority = "medium"
	Low      Priority = "low"
)

// PriorityOf returns the specification's priority for a category: security audits are critical; code
// review, architecture, debugging and troubleshooting high; documentation, classification and
// summarization low; everything else medium.
func PriorityOf(c Category) Priority {
	switch c {
	case SecurityAudit:
		return Critical
	case CodeReview, Architecture, Debugging, Troubleshooting:
		return High
	case Documentation, Classification, Summarization:
		return Low
	}
	return Medium
}

// keywords are the specification's signal words per category (one or two words each). A match is
// reported as a signal and adds weight to its category's score.
var keywords = map[Category][]string{
	SecurityAudit:   {"security", "vulnerability", "vulnerable", "cve", "injection", "xss", "csrf", "ssrf", "exploit", "owasp", "pentest", "penetration test", "threat model", "attack surface", "privilege escalation", "secrets", "sanitize", "auth bypass"},
	Debugging:       {"debug", "error", "stack trace", "traceback", "exception", "fix", "bug", "crash", "segfault", "panic", "null pointer", "wrong output", "off by one", "race condition"},
	Summarization:   {"summarize", "summarise", "summary", "tldr", "tl dr", "brief", "overview", "digest", "key points", "condense", "recap", "gist"},
	CodeReview:      {"review", "code review", "pull request", "diff", "pr", "reviewer", "nitpick", "lgtm", "code quality", "feedback on"},
	Architecture:    {"architecture", "system design", "microservice", "microservices", "monolith", "scalability", "scalable", "component", "event driven", "trade off", "tradeoff", "design"},
	Implementation:  {"implement", "write a function", "write a", "create a", "build a", "add an endpoint", "endpoint", "feature", "script that", "function that"},
	Refactoring:     {"refactor", "clean up", "cleanup", "extract", "simplify", "duplication", "duplicated", "rename", "restructure", "decouple", "modernize", "readability"},
	Testing:         {"test", "tests", "unit test", "integration test", "coverage", "mock", "fixture", "pytest", "jest", "junit", "assertion", "test case"},
	Documentation:   {"document", "documentation", "docs", "readme", "docstring", "docstrings", "comments", "api reference", "user guide", "changelog", "javadoc", "runbook"},
	Research:        {"research", "literature", "survey", "state of the art", "papers", "studies", "evidence", "sources", "compare approaches", "findings"},
	Classification:  {"classify", "categorize", "categorise", "label", "labels", "tag", "sentiment", "triage", "spam", "intent", "route each"},
	Planning:        {"plan", "roadmap", "milestone", "milestones", "schedule", "timeline", "sprint", "phases", "step by step", "rollout"},
	Evaluation:      {"evaluate", "grade", "score", "rubric", "rate", "assess", "judge", "which is better", "better answer", "criteria"},
	Troubleshooting: {"troubleshoot", "not working", "fails to start", "outage", "dns", "connection refused", "disk full", "crashloopbackoff", "unreachable", "keeps dropping", "server", "deployment"},
	// The secondary categories' signals are ours: the words that plainly ask for them.
	Translation:   {"translate", "translation", "translated", "into english", "into french", "into german", "into spanish", "into japanese", "localize", "localise", "localization"},
	DataAnalysis:  {"analyze data", "analyse data", "dataset", "csv", "statistics", "statistical", "correlation", "distribution", "trend", "anomalies", "regression", "median"},
	Brainstorming: {"brainstorm", "ideas", "ideas for", "names for", "suggest names", "come up", "list of ideas", "alternatives", "creative"},
	Explanation:   {"explain", "explanation", "eli5", "walk me through", "understand", "intuition", "conceptually", "in plain terms"},
	Comparison:    {"compare", "comparison", "versus", "vs", "pros and cons", "difference between", "which should", "better choice", "or should"},
	Configuration: {"config", "configure", "configuration", "yaml", "dockerfile", "nginx", "terraform", "kubernetes manifest", "github actions", "ci pipeline", "helm"},
	Migration:     {"migrate", "migration", "migrating", "upgrade", "port to", "move from", "switch from", "zero downtime", "backwards compatible"},
}
