// specdec serve's page script: one live view of the loaded pair, one simulation. No libraries.
//
// Live: POST /v1/chat/completions with stream and specdec_events on, read the server-sent
// events off fetch()'s body (blocks "data: {json}" split by blank lines, "data: [DONE]" last)
// and fold each chunk into the view:
//   {"choices": [{"delta": {"content": "Hi"}}], "specdec": {"source": "draft", "position": 1}}
//       -> <span class="tok draft">Hi</span>
//   {"choices": [], "specdec": {"rejected": {"text": " dog", "position": 3}}}
//       -> held until its correction arrives, then <span class="tok rejected"> dog</span> before it
//   {"choices": [], "specdec": {"round": {"drafted": 3, "accepted": 2, "k": 3}}}
//       -> one big-model step; positions 1..3 tried, 1..2 accepted (as decoding/stats.RunStats counts)
//   {"choices": [], "usage": {...}, "timings": {...}}   -> the speed
//   {"error": {"message": "..."}}                      -> the message, shown
// Simulation: `specdec simulate`'s rounds (simulate.py) with the same colours and symbols.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const SOURCES = ["draft", "correction", "bonus", "forced", "target"];

  // -- the numbers, formatted in one place --------------------------------------------------

  const fmtRatio = (x) => x.toFixed(2);
  const fmtPercent = (x) => `${Math.round(x * 100)} %`;

  // -- one answer's tallies -----------------------------------------------------------------

  function newTally() {
    return { steps: 0, tokens: 0, tried: [], accepted: [] };
  }

  // A round that drafted d tokens and kept a of them tried positions 1..min(a + 1, d) and
  // accepted positions 1..a (decoding/stats.RunStats.drafted_by_position / accepted_by_position).
  function countRound(tally, round) {
    tally.steps += 1;
    for (let i = 0; i < round.drafted; i++) {
      if (tally.tried.length <= i) {
        tally.tried.push(0);
        tally.accepted.push(0);
      }
      tally.tried[i] += i <= round.accepted ? 1 : 0;
      tally.accepted[i] += i < round.accepted ? 1 : 0;
    }
  }

  function showFigures(tally) {
    $("steps").textContent = String(tally.steps);
    $("tokens").textContent = String(tally.tokens);
    $("tokens-per-step").textContent = fmtRatio(tally.steps ? tally.tokens / tally.steps : 0);
    const body = $("acceptance").tBodies[0];
    while (body.rows.length > tally.tried.length) body.deleteRow(-1);
    tally.tried.forEach((tried, i) => {
      const row = body.rows[i] || body.insertRow();
      if (!row.cells.length) {
        row.insertCell().textContent = String(i + 1);
        row.insertCell();
        row.insertCell();
        const bar = document.createElement("span");
        bar.className = "bar";
        row.insertCell().appendChild(bar);
      }
      const rate = tried ? tally.accepted[i] / tried : 0;
      row.dataset.position = String(i + 1);
      row.dataset.tried = String(tried);
      row.dataset.accepted = String(tally.accepted[i]);
      row.cells[1].textContent = `${tally.accepted[i]} / ${tried}`;
      row.cells[2].textContent = tried ? fmtPercent(rate) : "–";
      row.cells[3].firstChild.style.width = `${rate * 100}%`;
    });
  }

  // -- the answer, span by span ---------------------------------------------------------------

  // What a rejected draft looks like in place: newlines and tabs as symbols (render.visible).
  const visible = (text) => text.replace(/\n/g, "↵").replace(/\t/g, "⇥");

  function span(cls, text) {
    const s = document.createElement("span");
    s.className = `tok ${cls}`;
    s.textContent = text;
    return s;
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = false;
  }

  // One chunk of the stream into the view. Returns false once the stream is over (an error).
  function take(chunk, view) {
    if (chunk.error) {
      showError(chunk.error.message || JSON.stringify(chunk.error));
      return false;
    }
    const ev = chunk.specdec || {};
    const choice = (chunk.choices || [])[0];
    if (choice && choice.delta && typeof choice.delta.content === "string" && ev.source) {
      if (ev.source === "correction" && view.waiting.length) {
        // render.InPlace: a rejection is shown just before the correction that replaced it.
        const rejected = view.waiting.shift();
        view.answer.appendChild(span("rejected", visible(rejected.text)));
      }
      const cls = SOURCES.includes(ev.source) ? ev.source : "target";
      const s = span(cls, choice.delta.content);
      s.dataset.position = String(ev.position);
      view.answer.appendChild(s);
      view.tally.tokens += 1;
      $("tokens").textContent = String(view.tally.tokens);
    } else if (choice && choice.delta && choice.delta.content && !ev.source) {
      view.answer.appendChild(span("target", choice.delta.content)); // a server without specdec_events
    }
    if (choice && choice.finish_reason) view.finish = choice.finish_reason;
    if (ev.rejected) view.waiting.push(ev.rejected);
    if (ev.round) {
      countRound(view.tally, ev.round);
      showFigures(view.tally);
      view.sequences = (view.sequences || 0) + (ev.round.sequences || 1);
      $("sequences").textContent = (view.sequences / view.tally.steps).toFixed(2);
    }
    if (chunk.timings) {
      view.timings = chunk.timings;
      const speed = chunk.timings.predicted_per_second;
      $("speed").textContent = typeof speed === "number" ? speed.toFixed(1) : "–";
    }
    if (chunk.usage) view.usage = chunk.usage;
    return true;
  }

  // The data of each event in a block of SSE text; the rest of the buffer is kept for later.
  function splitEvents(buffer) {
    const blocks = buffer.split(/\r?\n\r?\n/);
    const rest = blocks.pop();
    const events = blocks
      .map((block) =>
        block
          .split(/\r?\n/)
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, ""))
          .join("\n"),
      )
      .filter((data) => data !== "");
    return { events, rest };
  }

  // True when the stream reached [DONE]; false after an error, which is then on the page.
  async function readStream(response, view) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder("utf-8");
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      const { events, rest } = splitEvents(done ? buffer + "\n\n" : buffer);
      buffer = rest;
      for (const data of events) {
        if (data === "[DONE]") return true;
        if (!take(JSON.parse(data), view)) {
          await reader.cancel();
          return false;
        }
      }
      if (done) {
        showError("the stream ended before its last event ([DONE]): the server went away");
        return false;
      }
    }
  }

  async function errorOf(response) {
    const text = await response.text();
    try {
      const body = JSON.parse(text);
      if (body && body.error && body.error.message) return body.error.message;
    } catch (e) {
      // not JSON: fall through to the status line
    }
    return `${response.status} ${response.statusText}${text ? ": " + text.slice(0, 200) : ""}`;
  }

  // The request's body; a blank temperature or max tokens leaves the server's default (its options).
  function request() {
    const body = {
      messages: [{ role: "user", content: $("prompt").value }],
      stream: true,
      stream_options: { include_usage: true },
      specdec_events: true,
    };
    const temperature = $("temperature").value.trim();
    if (temperature !== "") body.temperature = Number(temperature);
    const maxTokens = $("max-tokens").value.trim();
    if (maxTokens !== "") body.max_tokens = Number(maxTokens);
    const k = $("draft-tokens").value;
    body.draft_tokens = k === "auto" ? "auto" : Number(k);
    return body;
  }

  let running = null; // the AbortController of the answer being streamed

  async function send() {
    const answer = $("answer");
    answer.replaceChildren();
    $("error").hidden = true;
    $("speed").textContent = "–";
    const view = { answer, tally: newTally(), waiting: [], finish: null, timings: null, usage: null };
    showFigures(view.tally);
    const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
    const key = $("api-key").value.trim();
    if (key) headers.Authorization = `Bearer ${key}`;
    running = new AbortController();
    $("send").textContent = "Stop";
    $("status").textContent = "waiting for the models…";
    answer.classList.add("streaming");
    let ended = false;
    let failed = false;
    try {
      const response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers,
        body: JSON.stringify(request()),
        signal: running.signal,
      });
      if (!response.ok) {
        failed = true;
        showError(await errorOf(response));
      } else {
        $("status").textContent = "streaming…";
        ended = await readStream(response, view);
        failed = !ended;
      }
    } catch (e) {
      if (e.name !== "AbortError") {
        failed = true;
        showError(`the request failed: ${e.message}`);
      }
    } finally {
      running = null;
      showFigures(view.tally);
      $("send").textContent = "Send";
      answer.classList.remove("streaming");
      answer.dataset.done = ended ? "true" : "false";
      $("status").textContent = ended ? summary(view) : failed ? "failed" : "stopped";
    }
  }

  function summary(view) {
    const parts = [`finished: ${view.finish || "?"}`];
    const t = view.timings;
    if (t) {
      parts.push(`${t.draft_n_accepted} of ${t.draft_n} drafted tokens accepted`);
      if (t.cache_n) parts.push(`${t.cache_n} prompt tokens from the cache`);
    }
    return parts.join("; ");
  }

  // -- the simulation (simulate.py) -----------------------------------------------------------

  // E[tokens per big-model step] under i.i.d. acceptance a (stats.expected_tokens_per_round).
  function expectedTokens(a, k) {
    return a >= 1 ? k + 1 : (1 - Math.pow(a, k + 1)) / (1 - a);
  }

  // mulberry32: a small seeded generator, so that a run can be replayed (seed shown in the title).
  function generator(seed) {
    let s = seed >>> 0;
    return function () {
      s = (s + 0x6d2b79f5) >>> 0;
      let t = s;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  const SIM_ROWS = 8; // rounds kept on screen
  const SIM_STEP_MS = 110; // one draft appearing, or the verdict
  const sim = { a: 0.7, k: 4, steps: 0, tokens: 0, playing: true, timer: null, seed: 0, random: null };

  function simCell(symbol, cls) {
    const c = document.createElement("span");
    c.className = `cell ${cls}`;
    c.textContent = symbol;
    return c;
  }

  function simSettings() {
    sim.a = Number($("sim-rate").value) / 100;
    sim.k = Number($("sim-k").value);
    $("sim-rate-value").textContent = `${$("sim-rate").value} %`;
    $("sim-k-value").textContent = String(sim.k);
    $("sim-expected").textContent = fmtRatio(expectedTokens(sim.a, sim.k));
    sim.steps = 0;
    sim.tokens = 0;
    sim.seed = (Date.now() & 0x7fffffff) >>> 0;
    sim.random = generator(sim.seed);
    $("sim-rounds").replaceChildren();
    $("sim-rounds").title = `seed ${sim.seed}`;
    simFigures();
  }

  function simFigures() {
    $("sim-steps").textContent = String(sim.steps);
    $("sim-tokens").textContent = String(sim.tokens);
    $("sim-measured").textContent = fmtRatio(sim.steps ? sim.tokens / sim.steps : 0);
  }

  // One round: the k drafts appear one by one, then the verdict (simulate.play's animation).
  function simRound() {
    const { a, k } = sim;
    let kept = 0;
    while (kept < k && sim.random() < a) kept++; // successes before the first failure
    const list = $("sim-rounds");
    const row = document.createElement("li");
    list.appendChild(row);
    while (list.children.length > SIM_ROWS) list.removeChild(list.firstChild);
    let shown = 0;
    const propose = () => {
      if (!sim.playing || row.parentNode !== list) return;
      if (shown < k) {
        row.appendChild(simCell("□", "proposed"));
        shown++;
        sim.timer = setTimeout(propose, SIM_STEP_MS);
        return;
      }
      row.replaceChildren();
      for (let i = 0; i < kept; i++) row.appendChild(simCell("■", "draft"));
      const bonus = kept === k;
      if (!bonus) {
        row.appendChild(simCell("✗", "rejected"));
        for (let i = kept + 1; i < k; i++) row.appendChild(simCell("·", "unchecked"));
      }
      row.appendChild(document.createTextNode(" → "));
      row.appendChild(simCell("■", bonus ? "bonus" : "correction"));
      const verdict = document.createElement("span");
      verdict.className = "verdict";
      verdict.textContent = `${kept} kept + ${bonus ? "bonus" : "correction"}`;
      row.appendChild(verdict);
      row.dataset.done = "true";
      sim.steps += 1;
      sim.tokens += kept + 1;
      simFigures();
      sim.timer = setTimeout(simRound, 2 * SIM_STEP_MS);
    };
    propose();
  }

  function simRestart() {
    clearTimeout(sim.timer);
    simSettings();
    if (sim.playing) simRound();
  }

  // -- wiring -----------------------------------------------------------------------------------

  function init() {
    $("ask").addEventListener("submit", (e) => {
      e.preventDefault();
      if (running) running.abort();
      else send();
    });
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        $("ask").requestSubmit();
      }
    });
    const rejected = () => $("answer").classList.toggle("show-rejected", $("show-rejected").checked);
    $("show-rejected").addEventListener("change", rejected);
    rejected();
    $("sim-rate").addEventListener("input", simRestart);
    $("sim-k").addEventListener("input", simRestart);
    $("sim-play").addEventListener("click", () => {
      sim.playing = !sim.playing;
      $("sim-play").textContent = sim.playing ? "Pause" : "Play";
      clearTimeout(sim.timer);
      const last = $("sim-rounds").lastChild;
      if (last && !last.dataset.done) last.remove(); // a round cut short is not counted
      if (sim.playing) simRound();
    });
    if (window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches) {
      sim.playing = false;
      $("sim-play").textContent = "Play";
    }
    simRestart();
    showSlots();
    setInterval(showSlots, 2000);
  }

  // The slots panel: GET /slots (behind the key, as the API) every 2 s.
  async function showSlots() {
    if (document.hidden) return;
    const key = $("api-key").value;
    let report;
    try {
      const response = await fetch("/slots", { headers: key ? { Authorization: `Bearer ${key}` } : {} });
      if (!response.ok) return;
      report = await response.json();
    } catch (e) {
      return;
    }
    const rows = report.slots.map((s) => {
      const tr = document.createElement("tr");
      const perStep = s.rounds ? (s.tokens / s.rounds).toFixed(2) : "–";
      const tokens = s.tokens === null ? "–" : String(s.tokens); // another key's slot: its figures are not shown
      for (const text of [String(s.slot), s.busy ? "generating" : "free", tokens, perStep]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      return tr;
    });
    $("slots").querySelector("tbody").replaceChildren(...rows);
    // A tenant's key gets its own slots alone: the server's passes and drafting rates need the admin key.
    const passes = Object.entries(report.target_passes || {}).map(([n, count]) => `${count} with ${n}`);
    $("passes").textContent = passes.length ? `big-model steps by sequences they held: ${passes.join(", ")}` : "";
    // Per batch size: the server's tokens/s with the draft model drafting and without, and which way it runs now.
    const rate = (x) => (x === null ? "–" : `${x}`);
    const ways = Object.entries(report.drafting || {}).map(
      ([n, d]) => `${n} sequences: ${rate(d.drafting_tokens_per_s)} drafting, ${rate(d.plain_tokens_per_s)} without (${d.drafts_now ? "drafting" : "not drafting"})`
    );
    $("drafting").textContent = ways.length ? `tokens/s by batch size: ${ways.join("; ")}` : "";
  }

  init();
})();
