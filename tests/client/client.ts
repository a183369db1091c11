// A client generated from dreamd's OpenAPI document, as an app in TypeScript would use
// it: post a turn, read a context block, and read a refusal through its typed error.
import createClient from "openapi-fetch";
import type { paths } from "./build/api.js";

declare const process: { argv: string[] }; // Node's, without its type package

const [base, token] = process.argv.slice(2);
const client = createClient<paths>({
  baseUrl: base,
  headers: { Authorization: `Bearer ${token}` },
});

const stored = await client.POST("/v1/turns", {
  params: { query: { embed: true } },
  body: { user: "ts-app", session: "ts-app-1", role: "user",
          content: "I water the ferns on the balcony every Sunday morning." },
});
if (stored.data === undefined) throw new Error(`POST /v1/turns: ${stored.error.error}`);

const block = await client.GET("/v1/context", {
  params: { query: { user: "ts-app", session: "ts-app-1", budget: 300 } },
});
if (block.data === undefined) throw new Error(`GET /v1/context: ${block.error.error}`);

const missing = await client.GET("/v1/users/{user}/memory", {
  params: { path: { user: "nobody-here" } },
});
// Typed bindings: an answer typed as a bare object would not compile here.
const ids: number[] = stored.data.ids;
const whose: string | null = block.data.user;
const tokens: number = block.data.tokens;
const recent: string[] = block.data.sections["recent"] ?? [];
const refusal: string | undefined = missing.error?.error;

console.log(JSON.stringify({ ids, user: whose, tokens, recent,
                             status: missing.response.status, refusal }));
