// The chat page of photon serve: a conversation streamed from /v1/chat/completions. Everything the model or the
// user writes is put on the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const log = $("log");
const state = { messages: [], controller: null, model: null };

for (const id of ["system", "temperature", "top-p", "max-tokens", "api-key"]) {
  const saved = localStorage.getItem("photon." + id);
  if (saved !== null) $(id).value = saved;
  $(id).addEventListener("change", () => localStorage.setItem("photon." + id, $(id).value));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText);
    state.model = body.data[0].id;
    $("model").textContent = state.model + " · context " + body.data[0].max_model_len + " tokens";
  } catch (e) {
    $("model").textContent = "not connected: " + e.message;
  }
}

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const body = document.createElement("span");
  body.className = "content";
  body.textContent = text;
  div.appendChild(body);
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("input").disabled = busy;
}

// Reads server-sent events from a fetch response; calls onData with each `data:` payload.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ")) onData(line.slice(6));
      }
    }
  }
}

async function send(text) {
  state.messages.push({ role: "user", content: text });
  bubble("user", text);
  const div = bubble("assistant", "");
  const content = div.querySelector(".content");
  let thinking = null;
  const stats = document.createElement("span");
  stats.className = "stats muted";
  div.appendChild(stats);

  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...state.messages);
  const body = {
    model: state.model || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($("temperature").value),
    top_p: Number($("top-p").value),
    max_tokens: Number($("max-tokens").value),
    chat_template_kwargs: { enable_thinking: $("thinking").checked },
  };
  state.controller = new AbortController();
  setBusy(true);
  const start = performance.now();
  let first = null, tokens = 0, answer = "", reasoning = "", stopped = false, finish = "", error = null;
  // A fast server sends hundreds of tokens a second; the page draws the text at most once a frame, so it stays
  // responsive (Stop included) however fast the tokens come.
  let frame = 0;
  const draw = () => {
    frame = 0;
    if (reasoning) {
      if (!thinking) {
        const details = document.createElement("details");
        const summary = document.createElement("summary");
        summary.textContent = "Thinking";
        thinking = document.createElement("div");
        thinking.className = "thinking";
        details.append(summary, thinking);
        div.insertBefore(details, content);
      }
      thinking.textContent = reasoning;
    }
    content.textContent = answer;
    log.scrollTop = log.scrollHeight;
  };
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: state.controller.signal,
    });
    if (!r.ok) {
      const err = await r.json().catch(() => ({}));
      throw new Error(err.error ? err.error.message : r.status + " " + r.statusText);
    }
    await readEvents(r, (data) => {
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      for (const choice of chunk.choices) {
        const d = choice.delta || {};
        if (d.reasoning_content) reasoning += d.reasoning_content;
        if (d.content) answer += d.content;
        if ((d.content || d.reasoning_content) && first === null) first = performance.now();
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      if (!frame) frame = requestAnimationFrame(draw);
    });
  } catch (e) {
    if (e.name === "AbortError") stopped = true;
    else error = e.message;
  } finally {
    if (frame) cancelAnimationFrame(frame);
    draw();
    if (error !== null) {
      div.classList.add("error");
      content.textContent = (answer ? answer + "\n\n" : "") + "Error: " + error;
    }
    setBusy(false);
    state.controller = null;
  }
  state.messages.push({ role: "assistant", content: answer });
  const end = performance.now();
  const parts = [];
  if (first !== null) parts.push("TTFT " + Math.round(first - start) + " ms");
  if (tokens > 0 && first !== null && end > first) parts.push((tokens / ((end - first) / 1000)).toFixed(1) + " tok/s");
  if (tokens > 0) parts.push(tokens + " tokens");
  if (stopped) parts.push("stopped");
  else if (finish) parts.push(finish);
  stats.textContent = parts.join(" · ");
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value;
  if (!text.trim() || state.controller) return;
  $("input").value = "";
  send(text).finally(() => $("input").focus());
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => { if (state.controller) state.controller.abort(); });
$("new-chat").addEventListener("click", () => {
  if (state.controller) state.controller.abort();
  state.messages = [];
  log.replaceChildren();
  $("input").focus();
});
$("toggle-settings").addEventListener("click", () => {
  const s = $("settings");
  s.hidden = !s.hidden;
  $("toggle-settings").setAttribute("aria-expanded", String(!s.hidden));
});
loadModel();
