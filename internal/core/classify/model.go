package classify

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Model is a multinomial logistic regression over hashed features: a category's score is its bias plus
// the weights of the task's features, scaled by 1/√(feature count) so long and short tasks score alike,
// and divided by a temperature fitted so the softmax's confidence is calibrated.
type Model struct {
	// Dim is the number of feature buckets.
	Dim uint32
	// Categories are the model's classes, in its weights' order.
	Categories []Category
	// Weights holds Dim rows of len(Categories) weights, each a multiple of Scale: a feature's weights
	// lie together, in 44 bytes for 22 categories, so scoring a feature reads about one cache line.
	Weights []int16
	Scale   float32
	Bias    []float32
	// Temperature divides the scores before the softmax.
	Temperature float64
	// Digest identifies the training data and options the model was trained from.
	Digest uint64
}

// scores writes the calibrated log-odds of every category for the features into s.
func (m *Model) scores(feats []uint32, s []float64) {
	k := len(m.Categories)
	var acc [maxCategories]int32 // exact: a task has under 30 000 features (maxWords), each under 2^15
	a := acc[:k]
	for _, f := range feats {
		row := m.Weights[int(f)*k : int(f)*k+k]
		a := a[:len(row)] // the same length, said so that the loop needs no bounds checks
		for ci, w := range row {
			a[ci] += int32(w)
		}
	}
	norm := float64(m.Scale) / math.Sqrt(float64(max(len(feats), 1)))
	for ci := range s {
		s[ci] = (float64(m.Bias[ci]) + float64(a[ci])*norm) / m.Temperature
	}
}

// quantize returns weights as int16 multiples of one scale, the largest weight's magnitude / 32767.
func quantize(w []float32) ([]int16, float32) {
	largest := float32(0)
	for _, x := range w {
		largest = max(largest, float32(math.Abs(float64(x))))
	}
	scale := largest / math.MaxInt16
	if scale == 0 {
		scale = 1
	}
	q := make([]int16, len(w))
	for i, x := range w {
		q[i] = int16(math.Round(float64(x / scale)))
	}
	return q, scale
}

// The shipped weights' file format, little-endian: magic, version, digest, temperature, dim, the
// category names (a count, then each as a length and its bytes), the biases as float32, a weight scale
// as float32, then Dim×K weights as int16 multiples of the scale: the weights as the model holds them.
const (
	modelMagic   = "CCLF"
	modelVersion = 1
)

// MarshalBinary encodes the model in the shipped format.
func (m *Model) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(modelMagic)
	put := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) } // a bytes.Buffer does not fail
	put(uint32(modelVersion))
	put(m.Digest)
	put(m.Temperature)
	put(m.Dim)
	put(uint32(len(m.Categories)))
	for _, c := range m.Categories {
		put(uint16(len(c)))
		b.WriteString(string(c))
	}
	put(m.Bias)
	put(m.Scale)
	put(m.Weights)
	return b.Bytes(), nil
}

// ErrModelFormat is returned for weights that are not in the shipped format.
var ErrModelFormat = errors.New("classifier weights: not in the expected format")

// UnmarshalBinary decodes a model written by MarshalBinary.
func (m *Model) UnmarshalBinary(data []byte) error {
	r := bytes.NewReader(data)
	magic := make([]byte, len(modelMagic))
	if _, err := r.Read(magic); err != nil || string(magic) != modelMagic {
		return fmt.Errorf("%w: bad magic", ErrModelFormat)
	}
	var version, n uint32
	get := func(v any) error { return binary.Read(r, binary.LittleEndian, v) }
	if err := errors.Join(get(&version), get(&m.Digest), get(&m.Temperature), get(&m.Dim), get(&n)); err != nil {
		return fmt.Errorf("%w: %w", ErrModelFormat, err)
	}
	if version != modelVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrModelFormat, version, modelVersion)
	}
	if n == 0 || n > maxCategories || m.Dim == 0 || uint64(m.Dim)*uint64(n)*2 > uint64(len(data)) || !(m.Temperature > 0) {
		return fmt.Errorf("%w: %d categories, %d buckets, temperature %v", ErrModelFormat, n, m.Dim, m.Temperature)
	}
	m.Categories = make([]Category, n)
	if err := readCategories(r, m.Categories); err != nil {
		return err
	}
	m.Bias = make([]float32, n)
	m.Weights = make([]int16, int(m.Dim)*int(n))
	if err := errors.Join(get(m.Bias), get(&m.Scale), get(m.Weights)); err != nil {
		return fmt.Errorf("%w: %w", ErrModelFormat, err)
	}
	if r.Len() != 0 {
		return fmt.Errorf("%w: %d bytes past the weights", ErrModelFormat, r.Len())
	}
	if !(m.Scale > 0) {
		return fmt.Errorf("%w: weight scale %v", ErrModelFormat, m.Scale)
	}
	return nil
}

// readCategories reads the category names into cats, each as a length and its bytes.
func readCategories(r *bytes.Reader, cats []Category) error {
	for i := range cats {
		var size uint16
		if err := binary.Read(r, binary.LittleEndian, &size); err != nil {
			return fmt.Errorf("%w: category %d: %w", ErrModelFormat, i, err)
		}
		name := make([]byte, size)
		if _, err := io.ReadFull(r, name); err != nil {
			return fmt.Errorf("%w: category %d: %w", ErrModelFormat, i, err)
		}
		cats[i] = Category(name)
	}
	return nil
}

// maxCategories bounds the category count so per-call scores live on the stack.
const maxCategories = 32
