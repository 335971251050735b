// hangar's MCP server driven by another client than the Python SDK's: the official TypeScript SDK's
// Client over streamable HTTP (the handshake era it negotiates, a session id, SSE). Its Client checks each
// tool's structuredContent against the tool's outputSchema, so a call that answers at all answered in shape.
//
//   node client.mjs URL TOKEN ENVIRONMENT SESSION   → one JSON document on stdout (what the test asserts)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, environment, session] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "hangar-ts-check", version: "1.0.0" });
const updates = new Set();
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.add(n.params.uri));
const out = { steps: {} };
const long = { timeout: 300_000 };

// Each step's result, or the error it raised ({error, code}): the test says which it expects.
async function step(name, fn) {
  try {
    out.steps[name] = await fn();
  } catch (e) {
    out.steps[name] = { error: String(e?.message ?? e), code: e?.code ?? null };
  }
}
const call = (name, args) => client.callTool({ name, arguments: args }, undefined, long);
const structured = (r) => ({ isError: r.isError ?? false, structured: r.structuredContent ?? null, text: r.content?.[0]?.text ?? "" });

await client.connect(transport);
out.protocol = transport.protocolVersion;
out.server = client.getServerVersion();
out.capabilities = client.getServerCapabilities();
await step("tools", async () => (await client.listTools()).tools.map((t) => t.name));
await step("templates", async () => (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate));
await step("subscribe_inbox", () => client.subscribeResource({ uri: "hangar://inbox" }));
await step("new_session", async () =>
  structured(await call("new_session", { name: session, environment, message: "say hello" })));
await step("subscribe_session", () => client.subscribeResource({ uri: `hangar://sessions/${session}` }));
await step("wait_1", async () => structured(await call("wait_for_turn", { ref: session })));
await step("send", async () => structured(await call("send_to_session", { name: session, message: "say goodbye" })));
await step("wait_2", async () => structured(await call("wait_for_turn", { ref: session })));
await step("exec", async () => structured(await call("exec", { session, command: "echo from-ts" })));
await step("session", async () =>
  JSON.parse((await client.readResource({ uri: `hangar://sessions/${session}` })).contents[0].text));
await step("inbox", async () => JSON.parse((await client.readResource({ uri: "hangar://inbox" })).contents[0].text));
await step("bad_name", async () => structured(await call("get_session", { name: "Not A Name" })));
await step("unknown_resource", () => client.readResource({ uri: "hangar://nothing-here" }));
await step("unsubscribe", () => client.unsubscribeResource({ uri: "hangar://inbox" }));
out.updates = [...updates].sort();
await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(out));
