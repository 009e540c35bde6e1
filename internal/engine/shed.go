package engine

// Shed counts a request that a door refused for load before it reached the engine (the remote door's
// bound on its requests in flight, answered with code) in the one line the engine writes for every
// request refused for load.
func (e *Engine) Shed(code string) { e.deps.Shed().Add(code) }
