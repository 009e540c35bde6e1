// Calls Conclave's Messages door once with the official Anthropic Node SDK at its default retry
// settings (no maxRetries given), as an application would, unchanged but for its base URL and key. Run
// by contract_node_budget_test.go:
//
//   CONCLAVE_BASE_URL=http://127.0.0.1:PORT CONCLAVE_API_KEY=ck-... CONCLAVE_MODEL=... node budget.mjs
//
// It prints one JSON object: how long the call took as the application sees it (elapsed_ms, measured
// around the call alone, retries and their waits included), and what the call gave: {"answer": {...}},
// or {"error": {...}} with the SDK's error as the application sees it (code is Conclave's own, which
// the body carries beside Anthropic's error type).
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({ baseURL: process.env.CONCLAVE_BASE_URL, apiKey: process.env.CONCLAVE_API_KEY });

const began = performance.now();
let outcome;
try {
  const m = await client.messages.create({
    model: process.env.CONCLAVE_MODEL,
    messages: [{ role: 'user', content: 'Which aisle is nearer the loading dock? (A) north (B) south' }],
    max_tokens: 16,
  });
  outcome = { answer: { id: m.id, content: m.content.find((b) => b.type === 'text')?.text ?? null } };
} catch (err) {
  if (!(err instanceof Anthropic.APIError)) {
    throw err;
  }
  outcome = {
    error: {
      class: err.constructor.name,
      status: err.status,
      type: err.type,
      code: err.error?.conclave?.code ?? null,
      message: err.message,
      should_retry: err.headers?.get('x-should-retry') ?? null,
      retry_after: err.headers?.get('retry-after') ?? null,
    },
  };
}
const elapsedMs = performance.now() - began;
console.log(JSON.stringify({ elapsed_ms: elapsedMs, ...outcome }));
