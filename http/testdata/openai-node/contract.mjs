// Calls Conclave with the official OpenAI Node SDK, as an application would, unchanged but for its base
// URL (and no retries, so that the test sees each answer). Run by contract_node_test.go:
//
//   CONCLAVE_BASE_URL=http://127.0.0.1:PORT/v1 CONCLAVE_API_KEY=... node contract.mjs CASE
//
// It prints one JSON object: {"completions": [...]} with what the client got, or {"error": {...}} with
// the SDK's error as the client sees it. The test asserts on it and on what the upstream received.
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.CONCLAVE_BASE_URL,
  apiKey: process.env.CONCLAVE_API_KEY,
  maxRetries: 0,
});
const model = process.env.CONCLAVE_MODEL;
const pixelPNG = process.env.CONCLAVE_PNG;

const weatherSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['city', 'temp_c'],
  properties: { city: { type: 'string' }, temp_c: { type: 'number' } },
};

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

const cases = {
  // Sampling parameters on a direct call to one model.
  async parameters() {
    return [
      await client.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Which aisle? (A) north (B) south' }],
        temperature: 0.1,
        max_tokens: 5,
        top_p: 0.5,
        stop: ['END'],
      }),
    ];
  },
  // A tool call, then the conversation sent back with the assistant's message as the SDK gave it and
  // the tool's answer.
  async tools() {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const first = await client.chat.completions.create({ model, messages, tools });
    const call = first.choices[0].message.tool_calls?.[0];
    if (!call) {
      return [first];
    }
    messages.push(first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '21 C and sunny' });
    const second = await client.chat.completions.create({ model, messages, tools });
    return [first, second];
  },
  // An answer constrained to a JSON schema.
  async json_schema() {
    return [
      await client.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Weather in Paris as JSON' }],
        response_format: { type: 'json_schema', json_schema: { name: 'weather', schema: weatherSchema, strict: true } },
      }),
    ];
  },
  // A question about an image, sent as a data URI.
  async image() {
    return [
      await client.chat.completions.create({
        model,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is in this image?' },
              { type: 'image_url', image_url: { url: `data:image/png;base64,${pixelPNG}`, detail: 'low' } },
            ],
          },
        ],
      }),
    ];
  },
  // A streamed answer: at its first piece of text the script says "first" on stderr and waits for a
  // line on stdin, so that the test can check the upstream still holds the rest.
  async stream() {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Which gas makes up most of the air?' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    let id = null;
    let told = false;
    for await (const chunk of stream) {
      id = chunk.id ?? id;
      const piece = chunk.choices[0]?.delta?.content ?? '';
      text += piece;
      usage = chunk.usage ?? usage;
      if (piece && !told) {
        told = true;
        process.stderr.write('first\n');
        await new Promise((resolve) => process.stdin.once('data', resolve));
      }
    }
    process.stdin.pause();
    return [{ id, text, usage }];
  },
  // A path Conclave does not serve: the SDK's error must carry OpenAI's error type.
  async unknown_path() {
    return [await client.get('/no-such-endpoint')];
  },
};

const name = process.argv[2];
if (!cases[name]) {
  console.error(`unknown case ${name}; cases: ${Object.keys(cases).join(', ')}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify({ completions: await cases[name]() }));
} catch (err) {
  if (!(err instanceof OpenAI.APIError)) {
    throw err;
  }
  console.log(
    JSON.stringify({
      error: { class: err.constructor.name, status: err.status, type: err.type, code: err.code, param: err.param, message: err.message },
    }),
  );
}
