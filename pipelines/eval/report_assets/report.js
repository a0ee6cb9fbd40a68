(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var EPISODES = DATA.episodes;
  var $ = function (id) { return document.getElementById(id); };
  var selected = null;

  // Every piece of model or KG text goes through textContent: nothing from the data becomes HTML.
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "class") node.className = attrs[k]; else node.setAttribute(k, attrs[k]);
      });
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fillSelect(select, values) {
    values.forEach(function (v) { select.appendChild(el("option", {value: v}, v)); });
  }
  function uniq(key) {
    var seen = {};
    EPISODES.forEach(function (e) { if (e[key] !== null && e[key] !== undefined) seen[e[key]] = true; });
    return Object.keys(seen).sort();
  }
  fillSelect($("filter-bucket"), uniq("bucket"));
  fillSelect($("filter-domain"), uniq("domain"));

  function haystack(e) {
    if (e._hay === undefined) {
      var bits = [e.qa_id, e.question, e.prediction || "", (e.gold_answers || []).join(" ")];
      e.turns.forEach(function (t) { t.parts.forEach(function (p) { bits.push(p.text); }); });
      e._hay = bits.join("\n").toLowerCase();
    }
    return e._hay;
  }

  function matches(e) {
    var c = $("filter-correct").value, b = $("filter-bucket").value, d = $("filter-domain").value;
    var q = $("filter-search").value.trim().toLowerCase();
    if (c === "correct" && e.correct !== true) return false;
    if (c === "wrong" && e.correct === true) return false;
    if (b && e.bucket !== b) return false;
    if (d && e.domain !== d) return false;
    if (q && haystack(e).indexOf(q) < 0) return false;
    return true;
  }

  function mark(e) {
    if (e.correct === true) return el("span", {"class": "mark ok", title: "correct"}, "\u2713");
    if (e.correct === false) return el("span", {"class": "mark bad", title: "wrong"}, "\u2717");
    return el("span", {"class": "mark na", title: "not scored"}, "?");
  }

  function renderList() {
    var list = $("episode-list"), shown = EPISODES.filter(matches), frag = document.createDocumentFragment();
    list.textContent = "";
    shown.forEach(function (e) {
      var li = el("li", {"data-testid": "episode-item", "data-qa-id": e.qa_id, "data-index": String(e.i),
                         "data-correct": String(e.correct)});
      if (selected === e.i) li.className = "selected";
      var button = el("button", {type: "button", "data-testid": "episode-button"});
      button.appendChild(mark(e));
      button.appendChild(el("span", {"class": "tag"}, e.domain));
      if (e.bucket) button.appendChild(el("span", {"class": "tag"}, e.bucket));
      if (e.sample) button.appendChild(el("span", {"class": "tag"}, "sample " + e.sample));
      button.appendChild(el("span", {"class": "q"}, e.question));
      button.addEventListener("click", function () { select(e.i); });
      li.appendChild(button);
      frag.appendChild(li);
    });
    list.appendChild(frag);
    var count = $("episode-count");
    count.textContent = shown.length + " of " + EPISODES.length + " episodes";
    count.setAttribute("data-count", String(shown.length));
  }

  function part(p) {
    var labels = {think: "think", call: "tool call", response: "tool response", answer: "answer", text: "text",
                  prompt: "user"};
    var box = el("div", {"class": "part k-" + p.kind, "data-testid": "turn-" + p.kind});
    var label = el("div", {"class": "label"}, labels[p.kind] || p.kind);
    if (p.record) {
      var r = p.record, status = r.ok ? "ok" : ("error: " + (r.error_type || "error"));
      label.appendChild(document.createTextNode(" \u00b7 " + (r.name || "unparsed") + " \u00b7 "));
      label.appendChild(el("span", {"class": r.ok ? "status-ok" : "status-error", "data-testid": "call-status"}, status));
    }
    box.appendChild(label);
    box.appendChild(el("pre", null, p.text));
    return box;
  }

  function turn(t, e) {
    var titles = {prompt: "prompt", assistant: "model turn " + ((t.round || 0) + 1), environment: "environment"};
    var box = el("div", {"class": "turn " + t.role, "data-testid": "turn", "data-role": t.role});
    box.appendChild(el("h4", null, titles[t.role] || t.role));
    t.parts.forEach(function (p) { box.appendChild(part(p)); });
    if (!t.parts.length) box.appendChild(el("div", {"class": "hint"}, "(empty)"));
    return box;
  }

  function goldPath(path) {
    var box = el("div", {"class": "gold-path" + (path.valid ? "" : " invalid"), "data-testid": "gold-path",
                         "data-valid": String(path.valid)});
    path.nodes.forEach(function (node, i) {
      if (i > 0) {
        var step = path.steps[i - 1] || {keywords: "", forward: true};
        var rel = step.forward ? " \u2014" + step.keywords + "\u2192 " : " \u2190" + step.keywords + "\u2014 ";
        box.appendChild(el("span", {"class": "rel"}, rel));
      }
      box.appendChild(el("b", {"data-testid": "gold-node"}, node));
    });
    if (!path.valid && path.reason) box.appendChild(el("div", {"class": "hint"}, "rejected: " + path.reason));
    return box;
  }

  function select(index) {
    var e = EPISODES[index];
    selected = index;
    Array.prototype.forEach.call(document.querySelectorAll("#episode-list li"), function (li) {
      li.className = li.getAttribute("data-index") === String(index) ? "selected" : "";
    });
    var detail = $("episode-detail");
    detail.textContent = "";
    detail.setAttribute("data-qa-id", e.qa_id);
    detail.setAttribute("data-index", String(e.i));
    var head = el("div", {"data-testid": "episode-header"});
    head.appendChild(el("h3", {id: "episode-question", "data-testid": "episode-question"}, e.question));
    var dl = el("dl");
    [["QA id", e.qa_id, "episode-qa-id"], ["domain", e.domain, "episode-domain"],
     ["bucket / hops", (e.bucket || "\u2014") + " / " + (e.hops === null ? "\u2014" : e.hops), "episode-bucket"],
     ["prediction", e.prediction === null ? "(no answer)" : e.prediction, "episode-prediction"],
     ["result", e.correct === true ? "correct" : (e.correct === false ? "wrong" : "not scored"), "episode-result"],
     ["finish", e.finish + " after " + e.rounds + " rounds, " + e.tool_calls + " tool calls", "episode-finish"],
     ["tokens / latency", e.generated_tokens + " generated / " + e.latency_s + " s", "episode-cost"],
     ["format errors", e.format_errors.length ? e.format_errors.join(", ") : "none", "episode-format-errors"],
     ["protocol", e.protocol + " (" + e.mode + ")", "episode-protocol"]
    ].forEach(function (row) {
      dl.appendChild(el("dt", null, row[0]));
      dl.appendChild(el("dd", {"data-testid": row[2]}, row[1]));
    });
    head.appendChild(dl);
    detail.appendChild(head);

    var grid = el("div", {"class": "detail"});
    var turns = el("div", {id: "episode-turns", "data-testid": "episode-turns"});
    if (e.system !== null && e.system !== undefined) {
      var sys = el("details", {"class": "turn prompt", "data-testid": "turn-system"});
      sys.appendChild(el("summary", null, "system prompt"));
      sys.appendChild(el("pre", null, DATA.systems[e.system]));
      turns.appendChild(sys);
    }
    e.turns.forEach(function (t) { turns.appendChild(turn(t, e)); });
    grid.appendChild(turns);

    var aside = el("aside", {id: "episode-gold", "data-testid": "episode-gold"});
    aside.appendChild(el("h4", null, "gold answers"));
    var answers = el("ul", {id: "episode-gold-answers", "data-testid": "episode-gold-answers"});
    e.gold_answers.forEach(function (a) { answers.appendChild(el("li", {"data-testid": "gold-answer"}, a)); });
    aside.appendChild(answers);
    aside.appendChild(el("h4", null, "gold paths"));
    var paths = el("div", {id: "episode-gold-paths", "data-testid": "episode-gold-paths"});
    var valid = e.gold_paths.filter(function (p) { return p.valid; });
    var rejected = e.gold_paths.filter(function (p) { return !p.valid; });
    valid.forEach(function (p) { paths.appendChild(goldPath(p)); });
    if (!valid.length) paths.appendChild(el("div", {"class": "hint"}, "no validated gold path"));
    if (rejected.length) {
      var more = el("details");
      more.appendChild(el("summary", null, rejected.length + " rejected path(s)"));
      rejected.forEach(function (p) { more.appendChild(goldPath(p)); });
      paths.appendChild(more);
    }
    if (e.gold_truncated) paths.appendChild(el("div", {"class": "hint"}, "(more paths existed; list truncated)"));
    aside.appendChild(paths);
    grid.appendChild(aside);
    detail.appendChild(grid);
    if (window.history && window.history.replaceState) {
      try { window.history.replaceState(null, "", "#episode=" + e.i); } catch (err) { /* file:// may refuse */ }
    }
  }

  ["filter-correct", "filter-bucket", "filter-domain"].forEach(function (id) {
    $(id).addEventListener("change", renderList);
  });
  $("filter-search").addEventListener("input", renderList);
  renderList();
  var m = /#episode=(\d+)/.exec(window.location.hash);
  if (m && EPISODES[+m[1]]) select(+m[1]);
  document.body.setAttribute("data-ready", "true");
})();
