package messages

// The kinds of a ContentPart (its type), named as OpenAI's chat format names them.
const (
	PartText  = "text"
	PartImage = "image_url"
)
