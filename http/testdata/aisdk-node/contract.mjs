// The Vercel AI SDK's OpenAI provider against Conclave's chat completions, one case per run (its name
// the first argument), printing what the application got as JSON: the text, the tool calls, the usage
// and Conclave's headers. CONCLAVE_BASE_URL, CONCLAVE_API_KEY and CONCLAVE_MODEL say where and what.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool, jsonSchema } from "ai";

const openai = createOpenAI({ baseURL: process.env.CONCLAVE_BASE_URL, apiKey: process.env.CONCLAVE_API_KEY });
const prompt = "Which gas makes up most of Earth's atmosphere?";
const headers = (h) => Object.fromEntries(Object.entries(h || {}).filter(([k]) => k.toLowerCase().startsWith("x-conclave-")));

const cases = {
  async text() {
    const r = await generateText({ model: openai.chat(process.env.CONCLAVE_MODEL), prompt, maxRetries: 0 });
    return { text: r.text, usage: r.usage, headers: headers(r.response.headers), id: r.response.id };
  },
  async panel() {
    const r = await generateText({ model: openai.chat("conclave/general"), prompt, maxRetries: 0 });
    return { text: r.text, headers: headers(r.response.headers), id: r.response.id };
  },
  async stream() {
    const r = streamText({ model: openai.chat(process.env.CONCLAVE_MODEL), prompt, maxRetries: 0 });
    let text = "";
    for await (const piece of r.textStream) text += piece;
    const response = await r.response;
    return { text, headers: headers(response.headers), id: response.id };
  },
  async tools() {
    const r = await generateText({
      model: openai.chat(process.env.CONCLAVE_MODEL), prompt: "What is the weather in Paris?", maxRetries: 0,
      tools: { get_weather: tool({ description: "The weather of a city", inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }) }) },
    });
    return { text: r.text, toolCalls: r.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })), headers: headers(r.response.headers) };
  },
};

try {
  console.log(JSON.stringify(await cases[process.argv[2]]()));
} catch (e) {
  console.log(JSON.stringify({ error: { class: e.constructor.name, status: e.statusCode ?? 0, message: String(e.message) } }));
}
