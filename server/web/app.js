// The translation page. It only uses the public API: /v1/languages for the pickers,
// /v1/models for the route's engine state, /v1/translate to translate, LibreTranslate's
// /frontend/settings and /translate_file for files. URLs are relative, so the page also works
// behind a reverse proxy that serves the server under a path prefix.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const el = {
    form: $("form"),
    source: $("source"),
    target: $("target"),
    swap: $("swap"),
    engine: $("engine"),
    text: $("text"),
    count: $("count"),
    output: $("output"),
    copy: $("copy"),
    detected: $("detected"),
    warnings: $("warnings"),
    alternatives: $("alternatives"),
    alternativesList: $("alternatives-list"),
    numAlternatives: $("num-alternatives"),
    translate: $("translate"),
    error: $("error"),
    settings: $("settings"),
    apiKey: $("api-key"),
    glossary: $("glossary"),
    glossaryBox: $("glossary-box"),
    file: $("file"),
    fileKinds: $("file-kinds"),
    translateFile: $("translate-file"),
    fileResult: $("file-result"),
  };
  const AUTO = "auto";
  const KEY_STORE = "lsmt.apiKey";
  const POLL_MS = 700;
  // Translation.warnings of the API, in words (docs/server.md).
  const WARNINGS = {
    repetition: "it repeats itself",
    length_ratio: "it is much longer or shorter than the text",
    off_target: "it does not look like the target language",
    uncertain_language:
      "the source language was not identified with confidence (choose it if the guess is wrong)",
  };

  let targetsBy = new Map(); // source code -> Set of target codes (the server's routes)
  let names = {}; // code -> language name
  let pivotsBy = new Map(); // source code -> {target: pivot} (pairs without a direct route)
  let detected = null; // language detected by the last "auto" translation of this text
  let busy = false;
  let engineSeq = 0; // only the newest engine-state answer is shown

  class ApiFailure extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // Local storage can be unavailable (private modes, disabled storage): the key then lives
  // only as long as the page.
  function loadKey() {
    try {
      return localStorage.getItem(KEY_STORE) || "";
    } catch {
      return "";
    }
  }

  function saveKey(value) {
    try {
      if (value) localStorage.setItem(KEY_STORE, value);
      else localStorage.removeItem(KEY_STORE);
    } catch {
      /* see loadKey */
    }
  }

  async function call(path, body) {
    const headers = { Accept: "application/json" };
    const key = el.apiKey.value.trim();
    if (key) headers["X-API-Key"] = key;
    const init = { headers };
    if (body instanceof FormData) {
      init.method = "POST"; // the browser sets the multipart content type with its boundary
      init.body = body;
    } else if (body !== undefined) {
      init.method = "POST";
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      throw new ApiFailure(0, "network_error", `Could not reach the server (${err.message}).`);
    }
    let data = null;
    try {
      data = await resp.json();
    } catch {
      /* not JSON: e.g. a proxy's error page; answered below from the status */
    }
    if (!resp.ok) {
      const e = data && data.error;
      let message = `The server answered ${resp.status} ${resp.statusText}`.trim() + ".";
      if (e && typeof e === "object" && e.message) message = e.message;
      else if (typeof e === "string") message = e;
      const retry = resp.headers.get("Retry-After");
      if (retry && (resp.status === 429 || resp.status === 503)) {
        message += ` Try again in ${retry} s.`;
      }
      throw new ApiFailure(resp.status, (e && e.code) || "http_error", message);
    }
    if (data === null) {
      throw new ApiFailure(resp.status, "bad_response", "The server's answer was not JSON.");
    }
    return data;
  }

  function nameOf(code) {
    return names[code] ? `${names[code]} (${code})` : code;
  }

  function option(value, label) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = label;
    return o;
  }

  // Codes may themselves hold a "-" (zh-Hant), so routes are kept as pairs, not split.
  function hasRoute(src, tgt) {
    return Boolean(targetsBy.get(src)?.has(tgt));
  }

  function targetsOf(source) {
    if (source !== AUTO) return [...(targetsBy.get(source) || [])].sort();
    const all = new Set();
    for (const targets of targetsBy.values()) for (const t of targets) all.add(t);
    return [...all].sort();
  }

  function fillTargets(preferred) {
    const keep = preferred || el.target.value;
    const targets = targetsOf(el.source.value);
    el.target.replaceChildren(...targets.map((c) => option(c, nameOf(c))));
    if (targets.includes(keep)) el.target.value = keep;
  }

  function showError(message) {
    el.error.textContent = message;
    el.error.hidden = false;
  }

  function clearError() {
    el.error.hidden = true;
    el.error.textContent = "";
  }

  function clearResult() {
    el.output.textContent = "";
    el.copy.disabled = true;
    el.detected.hidden = true;
    el.detected.textContent = "";
    el.warnings.hidden = true;
    el.warnings.textContent = "";
    el.alternatives.hidden = true;
    el.alternativesList.replaceChildren();
  }

  // The language the text is in, as far as the page knows.
  function currentSource() {
    return el.source.value === AUTO ? detected : el.source.value;
  }

  function updateSwap() {
    const src = currentSource();
    const ok = Boolean(src) && hasRoute(el.target.value, src);
    el.swap.disabled = busy || !ok;
    el.swap.title = ok
      ? "Swap languages"
      : src
        ? `No route ${el.target.value}-${src} on this server`
        : "Swap languages (the source language is not known yet)";
  }

  function currentPair() {
    const src = currentSource();
    return src && src !== el.target.value ? [src, el.target.value] : null;
  }

  const STATES = {
    unloaded: ["cold", "cold", "loaded on the first translation, which therefore takes longer"],
    loading: ["loading", "loading", "translations wait until it is ready"],
    loaded: ["ready", "ready", ""],
    host: ["ready", "ready", "parked in host memory, moved back to the device on the next use"],
    failed: ["failed", "failed", ""],
  };

  // Where a route's model comes from, when it is not an LSMT bundle (/v1/models' kind).
  const KINDS = { argos: "Argos package", ctranslate2: "CTranslate2 model" };

  function engineParts(src, tgt, [engine, bundle]) {
    const kind = KINDS[bundle.kind];
    const version = bundle.provenance.package_version || bundle.provenance.version;
    const source = kind ? ` (${kind} ${bundle.name}${version ? ` ${version}` : ""})` : "";
    const parts = [document.createTextNode(`Engine ${nameOf(src)} → ${nameOf(tgt)}${source}: `)];
    const [cls, word, note] = STATES[engine.state] || ["", engine.state, ""];
    const state = document.createElement("span");
    state.className = `state ${cls}`;
    state.dataset.state = cls || engine.state;
    state.textContent = word;
    parts.push(state);
    let detail = note;
    if (engine.state === "failed") {
      detail = engine.error || "its load failed";
      if (engine.retry_in_s) detail += `; retried in ${Math.ceil(engine.retry_in_s)} s`;
    }
    if (detail) parts.push(document.createTextNode(` (${detail})`));
    return parts;
  }

  // A pair without a direct route is translated through a pivot language: one engine per leg.
  function renderEngines(legs) {
    const parts = [];
    if (legs.length > 1) {
      parts.push(document.createTextNode(`Through ${nameOf(legs[0][1])}. `));
    }
    legs.forEach(([src, tgt, engine], i) => {
      if (i > 0) parts.push(document.createTextNode(" · "));
      parts.push(...engineParts(src, tgt, engine));
    });
    el.engine.replaceChildren(...parts);
    const states = legs.map(([, , [engine]]) => engine.state);
    return states.find((s) => s !== "loaded") || "loaded";
  }

  // [engine, its bundle] of a route, or null.
  function engineFor(models, src, tgt) {
    const route = `${src}-${tgt}`; // as /v1/models writes routes
    const bundle = models.bundles.find((b) => b.routes.includes(route));
    const engine =
      bundle && models.engines.find((e) => e.bundle === bundle.name && e.routes.includes(route));
    return engine ? [engine, bundle] : null;
  }

  // Shows the state of the engine that serves the chosen pair: the first bundle with the
  // route serves it (the server's default), and /v1/models lists each engine's routes.
  async function refreshEngine() {
    const seq = ++engineSeq;
    const pair = currentPair();
    if (!pair) {
      el.engine.textContent =
        el.source.value === AUTO ? "The engine is chosen once the language is detected." : "";
      return null;
    }
    let models;
    try {
      models = await call("v1/models");
    } catch (err) {
      if (seq === engineSeq) el.engine.textContent = `Engine state unknown: ${err.message}`;
      return null;
    }
    if (seq !== engineSeq) return null;
    const [src, tgt] = pair;
    const pivot = (pivotsBy.get(src) || {})[tgt];
    const pairs = pivot ? [[src, pivot], [pivot, tgt]] : [[src, tgt]];
    const legs = pairs.map(([s, t]) => [s, t, engineFor(models, s, t)]);
    if (legs.some(([, , engine]) => !engine)) {
      el.engine.textContent = `No engine serves ${src}-${tgt}.`;
      return null;
    }
    return renderEngines(legs);
  }

  // While a translation runs (or someone else's load is under way) the state is polled, so
  // "cold" turns into "loading" and then "ready" in front of the user.
  let pollTimer = null;
  function startPolling() {
    stopPolling();
    pollTimer = setInterval(refreshEngine, POLL_MS);
  }
  function stopPolling() {
    if (pollTimer !== null) clearInterval(pollTimer);
    pollTimer = null;
  }
  async function refreshUntilSettled() {
    const state = await refreshEngine();
    if (state === "loading" && !busy) setTimeout(refreshUntilSettled, POLL_MS);
  }

  function percent(x) {
    return `${Math.round(x * 100)}%`;
  }

  function renderResult(t, target) {
    el.output.textContent = t.text;
    el.output.lang = target;
    el.copy.disabled = false;
    if (t.detected) {
      detected = t.detected.language;
      let line = `Detected language: ${nameOf(detected)}, confidence ${percent(t.detected.confidence)}`;
      if (t.engine === null) line += " (already in the target language: shown unchanged)";
      el.detected.textContent = line + ".";
      el.detected.hidden = false;
    }
    if (t.pivot) {
      const through = `Translated through ${nameOf(t.pivot)}: no model translates this pair directly.`;
      el.detected.textContent = t.detected ? `${el.detected.textContent} ${through}` : through;
      el.detected.hidden = false;
    }
    const warnings = (t.warnings || []).map((w) => WARNINGS[w] || w);
    el.warnings.textContent = warnings.length
      ? `This translation may be wrong: ${warnings.join("; ")}.`
      : "";
    el.warnings.hidden = warnings.length === 0;
    const alts = t.alternatives || [];
    el.alternativesList.replaceChildren(
      ...alts.map((a) => {
        const li = document.createElement("li");
        li.textContent = a.text;
        li.lang = target;
        li.dir = "auto";
        return li;
      }),
    );
    el.alternatives.hidden = alts.length === 0;
  }

  function setBusy(on) {
    busy = on;
    el.translate.disabled = on;
    el.translate.textContent = on ? "Translating…" : "Translate";
    el.output.setAttribute("aria-busy", String(on));
    updateSwap();
  }

  // The glossary box: "source = target" lines are the glossary, a term alone is kept as it
  // is. A line with "=" but an empty side is the user's mistake: said, not sent.
  function readGlossary() {
    const glossary = {};
    const keep = [];
    for (const [i, raw] of el.glossary.value.split("\n").entries()) {
      const line = raw.trim();
      if (!line) continue;
      const at = line.indexOf("=");
      if (at < 0) {
        keep.push(line);
        continue;
      }
      const term = line.slice(0, at).trim();
      const rendering = line.slice(at + 1).trim();
      if (!term || !rendering) {
        throw new ApiFailure(0, "glossary", `Glossary line ${i + 1}: write "source term = target term", or a term alone.`);
      }
      glossary[term] = rendering;
    }
    const terms = {};
    if (Object.keys(glossary).length) terms.glossary = glossary;
    if (keep.length) terms.do_not_translate = keep;
    return terms;
  }

  // The glossary's terms, or null when a line is malformed (said, and the box opened).
  function termsOrSay() {
    try {
      return readGlossary();
    } catch (err) {
      showError(err.message);
      el.glossaryBox.open = true;
      el.glossary.focus();
      return null;
    }
  }

  async function translate() {
    if (busy || el.translate.disabled) return;
    const target = el.target.value;
    const terms = termsOrSay();
    if (terms === null) return;
    const body = { text: el.text.value, source: el.source.value, target, ...terms };
    const n = Number.parseInt(el.numAlternatives.value, 10);
    if (!Number.isNaN(n) && n !== 0) body.num_alternatives = n;
    clearError();
    clearResult();
    setBusy(true);
    startPolling();
    try {
      const data = await call("v1/translate", body);
      renderResult(data.translations[0], target);
    } catch (err) {
      showError(err.message);
      if (err.status === 401 || err.status === 403) {
        el.settings.open = true;
        el.apiKey.focus();
      }
    } finally {
      stopPolling();
      setBusy(false);
      refreshEngine();
    }
  }

  async function translateFile() {
    const file = el.file.files[0];
    if (!file) {
      showError("Choose a file to translate.");
      return;
    }
    const terms = termsOrSay();
    if (terms === null) return;
    const form = new FormData();
    form.append("file", file);
    form.append("source", el.source.value);
    form.append("target", el.target.value);
    if (terms.glossary) form.append("glossary", JSON.stringify(terms.glossary));
    if (terms.do_not_translate) form.append("do_not_translate", JSON.stringify(terms.do_not_translate));
    clearError();
    el.fileResult.hidden = true;
    el.translateFile.disabled = true;
    el.translateFile.textContent = "Translating…";
    try {
      const data = await call("translate_file", form);
      const link = document.createElement("a");
      link.href = data.translatedFileUrl;
      link.id = "file-link";
      link.download = file.name;
      link.textContent = `Download ${file.name} translated`;
      el.fileResult.replaceChildren(link);
      el.fileResult.hidden = false;
    } catch (err) {
      showError(err.message);
    } finally {
      el.translateFile.disabled = false;
      el.translateFile.textContent = "Translate file";
    }
  }

  function swap() {
    const src = currentSource();
    const tgt = el.target.value;
    if (!src || !hasRoute(tgt, src)) return;
    // The translation becomes the new text, as in other translators.
    const translated = el.output.textContent;
    el.source.value = tgt;
    fillTargets(src);
    if (translated) {
      el.text.value = translated;
      clearResult();
    }
    detected = null;
    clearError();
    updateSwap();
    refreshUntilSettled();
  }

  async function copy() {
    const text = el.output.textContent;
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // The clipboard API needs a secure context (https or localhost): select the text and
      // use the older command elsewhere.
      const range = document.createRange();
      range.selectNodeContents(el.output);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      document.execCommand("copy");
    }
    el.copy.textContent = "Copied";
    setTimeout(() => {
      el.copy.textContent = "Copy";
    }, 1500);
  }

  async function init() {
    el.apiKey.value = loadKey();
    el.apiKey.addEventListener("input", () => saveKey(el.apiKey.value.trim()));
    el.form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      translate();
    });
    el.form.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        translate();
      }
    });
    el.source.addEventListener("change", () => {
      fillTargets();
      updateSwap();
      refreshUntilSettled();
    });
    el.target.addEventListener("change", () => {
      updateSwap();
      refreshUntilSettled();
    });
    el.text.addEventListener("input", () => {
      // Code points, as the server counts them against its limit (length counts UTF-16 units).
      const n = [...el.text.value].length;
      el.count.textContent = `${n} character${n === 1 ? "" : "s"}`;
      if (detected !== null) {
        detected = null;
        updateSwap();
      }
    });
    el.swap.addEventListener("click", swap);
    el.copy.addEventListener("click", copy);
    el.translateFile.addEventListener("click", translateFile);

    let catalogue;
    try {
      catalogue = await call("v1/languages");
    } catch (err) {
      showError(`The language list could not be loaded: ${err.message}`);
      return;
    }
    targetsBy = new Map(catalogue.languages.map((l) => [l.code, new Set(l.targets)]));
    names = Object.fromEntries(catalogue.languages.map((l) => [l.code, l.name]));
    pivotsBy = new Map(catalogue.languages.map((l) => [l.code, l.pivots || {}]));
    if (catalogue.routes.length === 0) {
      showError("This server translates no language pair.");
      return;
    }
    const sources = catalogue.languages.filter((l) => l.targets.length > 0).map((l) => l.code);
    const options = sources.map((c) => option(c, nameOf(c)));
    if (catalogue.auto_detect.length > 0) options.unshift(option(AUTO, "Detect language"));
    el.source.replaceChildren(...options);
    const browser = (navigator.language || "").split("-")[0];
    fillTargets(browser);
    el.source.disabled = false;
    el.target.disabled = false;
    el.translate.disabled = false;
    try {
      const kinds = (await call("frontend/settings")).supportedFilesFormat || [];
      el.file.accept = kinds.join(",");
      el.fileKinds.textContent = kinds.join(", ");
      el.translateFile.disabled = kinds.length === 0;
    } catch {
      /* without the settings the file box stays off; text translation works */
    }
    document.body.dataset.ready = "true"; // the pickers are filled (tests wait for this)
    updateSwap();
    refreshUntilSettled();
  }

  init();
})();
