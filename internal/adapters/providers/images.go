package providers

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// image is an image part as the Anthropic and Gemini formats take it: inline bytes (from a data URI)
// with their media type, or a URL the provider fetches. Conclave never fetches an image itself.
type image struct {
	// MediaType and Data (base64) are set for a data URI, URL for anything else.
	MediaType, Data string
	URL             string
}

// imageOf reads an image part's URL: a data URI becomes inline base64 data, any other URL is passed on.
func imageOf(u string) (image, error) {
	if !strings.HasPrefix(strings.ToLower(u), "data:") {
		return image{URL: u}, nil
	}
	meta, payload, ok := strings.Cut(u[len("data:"):], ",")
	if !ok {
		return image{}, errors.New("a data URI without a comma")
	}
	params := strings.Split(meta, ";")
	mediaType := strings.ToLower(strings.TrimSpace(params[0]))
	encoded := false
	for _, p := range params[1:] {
		if strings.EqualFold(strings.TrimSpace(p), "base64") {
			encoded = true
		}
	}
	if !strings.HasPrefix(mediaType, "image/") {
		return image{}, fmt.Errorf("a data URI of %q, not an image", mediaType)
	}
	if encoded {
		// Both formats take standard base64: spaces and line breaks, which data URIs may carry, go.
		payload = strings.Map(func(r rune) rune {
			if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
				return -1
			}
			return r
		}, payload)
		return image{MediaType: mediaType, Data: payload}, nil
	}
	raw, err := url.PathUnescape(payload)
	if err != nil {
		return image{}, fmt.Errorf("a data URI: %w", err)
	}
	return image{MediaType: mediaType, Data: base64.StdEncoding.EncodeToString([]byte(raw))}, nil
}

// mediaTypeOf guesses an image URL's media type from its extension, for a format that wants one; ""
// when it cannot tell.
func mediaTypeOf(u string) string {
	p := u
	if parsed, err := url.Parse(u); err == nil {
		p = parsed.Path
	}
	switch strings.ToLower(path.Ext(p)) {
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".gif":
		return "image/gif"
	case ".webp":
		return "image/webp"
	case ".heic":
		return "image/heic"
	case ".heif":
		return "image/heif"
	}
	return ""
}

// refused is a call a wire format cannot carry as the caller wrote it: the caller's to fix, never sent.
func refused(provider, model string, err error) error {
	return &resilience.Error{Kind: resilience.MalformedRequest, Provider: provider, Model: model, Status: 400, Err: err}
}
