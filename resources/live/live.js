// The student page of Decoding Lab's live round. Everything the server sends is shown with
// textContent (never as markup); the page keeps only a rejoin key, in sessionStorage.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  let ws = null, key = sessionStorage.getItem("live-key") || "", code = "", nick = "";
  let over = false, retry = 0, question = null, refusal = "";

  function visible(t) {
    return String(t).replace(/ /g, "\u2423").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205";
  }
  function pct(p) {
    if (p === null || p === undefined) return "?";
    return p >= 0.001 ? (100 * p).toFixed(1) + "%" : p.toExponential(1);
  }
  function say(text) { $("status").textContent = text; }
  function show(id, on) { $(id).hidden = !on; }
  function send(obj) { if (ws && ws.readyState === 1) ws.send(JSON.stringify(obj)); }

  function connect() {
    ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
    ws.onopen = () => { retry = 0; if (code && (nick || key)) send({ type: "join", code, nick, key }); };
    ws.onmessage = (e) => { let m; try { m = JSON.parse(e.data); } catch (x) { return; } handle(m); };
    ws.onclose = () => {
      ws = null;
      if (over) return;
      if (!key) { show("join", true); say(refusal || "Not connected: check the code and join again."); return; }
      retry = Math.min(retry + 1, 6);
      say("Connection lost: rejoining…");
      setTimeout(connect, 300 * retry);
    };
  }

  function handle(m) {
    switch (m.type) {
      case "welcome":
        refusal = ""; key = m.key; sessionStorage.setItem("live-key", key); nick = m.nick;
        $("me").textContent = m.nick; show("join", false); show("play", true);
        say("Joined. Wait for the teacher's question.");
        break;
      case "refused":
        if (key) { key = ""; sessionStorage.removeItem("live-key"); }
        refusal = m.message; show("join", true); show("play", false); say(m.message);
        break;
      case "question": ask(m); break;
      case "answered":
        show("sent", true); $("sent").textContent = "Sent. You can change it until the teacher closes.";
        break;
      case "closed": say("Answers are closed. The reveal is coming…"); lock(true); break;
      case "wait": say(m.message || "Wait for the teacher's question."); break;
      case "reveal": reveal(m); break;
      case "error": say(m.message); break;
      case "removed": case "ended":
        over = true; key = ""; sessionStorage.removeItem("live-key");
        show("play", false); show("join", false); say(m.message || "The round has ended. Thank you!");
        break;
    }
  }

  function lock(on) {
    $("word").disabled = on;
    $("guess").querySelector("button").disabled = on;
    for (const b of $("choices").children) b.disabled = on;
  }

  function ask(m) {
    question = m;
    show("reveal", false); show("question", true); show("sent", false);
    $("context").textContent = m.context;
    const guessing = m.mode === "guess";
    $("ask").textContent = "Question " + m.number + ": " +
      (guessing ? "what comes next?" : m.mode === "sampler" ? "you are the sampler: pick the next token" : "vote for the next token");
    show("guess", guessing); show("choices", !guessing);
    $("word").value = guessing && typeof m.answer === "string" ? m.answer : "";
    const box = $("choices"); box.textContent = "";
    (m.choices || []).forEach((text, i) => {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = visible(text);
      b.setAttribute("aria-pressed", m.answer === i ? "true" : "false");
      b.addEventListener("click", () => {
        for (const o of box.children) o.setAttribute("aria-pressed", "false");
        b.setAttribute("aria-pressed", "true");
        send({ type: "answer", choice: i });
      });
      box.appendChild(b);
    });
    lock(false);
    if (m.answer !== undefined && m.answer !== null) { show("sent", true); $("sent").textContent = "Sent."; }
    say(guessing ? "Type the word you think the model writes next." : "Tap one.");
    if (guessing) $("word").focus();
  }

  function reveal(m) {
    show("question", false); show("reveal", true);
    $("reveal-label").textContent = m.class_choice ? "The class's token (the story goes on from it)" : "The model's answer";
    $("picked").textContent = visible(m.picked) + "  (" + pct(m.prob) + ")" +
      (m.class_choice ? "  \u2014 the class chose it" : "");
    const mine = m.mine;
    // a vote's answer as its button showed it (␣ for the leading space); a guess as typed
    const said = mine && question && question.mode !== "guess" ? visible(mine.answer) : mine && mine.answer;
    let line;
    if (!mine) line = "You did not answer this one.";
    else if (mine.prob === null) line = "Your answer \u201c" + said + "\u201d: no token reads like this.";
    else line = "Your answer \u201c" + said + "\u201d: probability " + pct(mine.prob) +
      ", surprise " + mine.bits.toFixed(1) + " bits, rank " + mine.rank +
      (!mine.picked ? "." : m.class_choice ? ". The class went with you." : ". Spot on!");
    $("mine").textContent = line;
    const top = $("top"); top.textContent = "";
    (m.top || []).forEach(([text, p]) => {
      const li = document.createElement("li");
      li.textContent = visible(text) + "  " + pct(p);
      if (mine && mine.token === text) li.className = "you";
      top.appendChild(li);
    });
    say("Revealed. Wait for the next question.");
  }

  $("join").addEventListener("submit", (e) => {
    e.preventDefault();
    code = $("code").value.trim().toUpperCase(); nick = $("nick").value.trim(); key = "";
    sessionStorage.removeItem("live-key");
    if (ws && ws.readyState === 1) send({ type: "join", code, nick });
    else connect();
    say("Joining…");
  });
  $("guess").addEventListener("submit", (e) => {
    e.preventDefault();
    const word = $("word").value.trim();
    if (word) send({ type: "answer", guess: word });
  });

  code = (params.get("code") || "").toUpperCase();
  $("code").value = code;
  if (key && code) { connect(); say("Rejoining…"); }
  else { show("join", true); say("Enter your nickname to join."); }
})();
