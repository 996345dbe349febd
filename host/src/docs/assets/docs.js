// filerouter /docs: filtering, method chips, theme toggle, the Authorize dialog and "try it" forms.
// The page is complete without this script; it only adds behaviour.
(function () {
  "use strict";
  var $ = function (sel, root) { return (root || document).querySelector(sel); };
  var $$ = function (sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); };

  // Theme: follows the system until toggled; the choice is remembered.
  var themeButton = $("#theme");
  if (themeButton) {
    themeButton.addEventListener("click", function () {
      var root = document.documentElement;
      var dark = root.dataset.theme ? root.dataset.theme === "dark"
        : window.matchMedia("(prefers-color-scheme: dark)").matches;
      root.dataset.theme = dark ? "light" : "dark";
      try { localStorage.setItem("filerouter-theme", root.dataset.theme); } catch (e) { /* private mode */ }
    });
  }

  // Filter: every word typed must appear in the operation's method, path, parameters or text;
  // pressed method chips narrow to those methods.
  var filter = $("#filter");
  var ops = $$(".op");
  var groups = $$(".group");
  var chips = $$(".bar-row");
  var shown = $("#shown");
  var nothing = $("#nothing");

  function apply() {
    var words = (filter ? filter.value : "").toLowerCase().split(/\s+/).filter(Boolean);
    var methods = chips.filter(function (c) { return c.getAttribute("aria-pressed") === "true"; })
      .map(function (c) { return c.dataset.method; });
    var count = 0;
    ops.forEach(function (op) {
      var text = op.dataset.search || "";
      var ok = words.every(function (w) { return text.indexOf(w) !== -1; }) &&
        (methods.length === 0 || methods.indexOf(op.dataset.method) !== -1);
      op.hidden = !ok;
      if (ok) count++;
    });
    groups.forEach(function (g) {
      var any = $$(".op", g).some(function (op) { return !op.hidden; });
      g.hidden = !any;
      var link = $('[data-group-link="' + g.id + '"]');
      if (link) link.hidden = !any;
    });
    if (shown) shown.textContent = count === ops.length ? ops.length + " operations" : count + " of " + ops.length;
    if (nothing) nothing.hidden = count !== 0;
  }
  if (filter) {
    filter.addEventListener("input", apply);
    filter.addEventListener("keydown", function (e) {
      if (e.key === "Escape") { filter.value = ""; apply(); }
    });
  }
  chips.forEach(function (chip) {
    chip.addEventListener("click", function () {
      chip.setAttribute("aria-pressed", chip.getAttribute("aria-pressed") === "true" ? "false" : "true");
      apply();
    });
  });
  document.addEventListener("keydown", function (e) {
    var tag = (e.target && e.target.tagName) || "";
    if (e.key === "/" && filter && !/^(INPUT|TEXTAREA|SELECT)$/.test(tag)) {
      e.preventDefault();
      filter.focus();
    }
  });
  var expand = $("#expand");
  if (expand) {
    expand.addEventListener("click", function () {
      var open = expand.textContent === "Expand all";
      $$(".op details").forEach(function (d) { if (!d.closest(".op").hidden) d.open = open; });
      expand.textContent = open ? "Collapse all" : "Expand all";
    });
  }
  function openHash() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.classList.contains("op")) {
      $("details", target).open = true;
      target.scrollIntoView();
    }
  }
  window.addEventListener("hashchange", openHash);
  openHash();
  apply();

  // Authorize: credentials per security scheme ({in, key, value}), kept for this tab only, and
  // sent by "try it" with the operations whose data-security names the scheme.
  var AUTH = "filerouter-auth";
  var auth = {};
  try { auth = JSON.parse(sessionStorage.getItem(AUTH) || "{}") || {}; } catch (e) { auth = {}; }
  var dialog = $("#auth-dialog");
  var authorize = $("#authorize");

  function needs(form) {
    try { return JSON.parse(form.dataset.security || "[]"); } catch (e) { return []; }
  }

  function setCookie(credential, remove) {
    document.cookie = credential.key + "=" + (remove ? "" : encodeURIComponent(credential.value)) +
      "; path=/; SameSite=Strict" + (remove ? "; max-age=0" : "");
  }

  function refreshAuth() {
    var names = Object.keys(auth);
    if (authorize) {
      authorize.classList.toggle("on", names.length > 0);
      authorize.title = names.length ? "Authorized: " + names.join(", ") : "Credentials that Try it sends";
    }
    $$("form.scheme").forEach(function (form) {
      $(".auth-state", form).textContent = auth[form.dataset.scheme] ? "authorized" : "";
    });
    $$("form.try").forEach(function (form) {
      var note = $(".auth-note", form);
      if (!note) return;
      var needed = needs(form);
      var have = needed.filter(function (name) { return auth[name]; });
      note.textContent = have.length
        ? "Sends the credentials of " + have.join(", ") + " (Authorize, at the top, to change them)."
        : "Requires " + needed.join(" or ") + ": not authorized yet (Authorize, at the top).";
    });
  }

  function saveAuth() {
    try { sessionStorage.setItem(AUTH, JSON.stringify(auth)); } catch (e) { /* private mode: this page only */ }
    refreshAuth();
    $$("form.try").forEach(function (form) { form.dispatchEvent(new Event("input")); });
  }

  if (authorize && dialog) {
    authorize.addEventListener("click", function () {
      if (typeof dialog.showModal === "function") dialog.showModal(); else dialog.setAttribute("open", "");
    });
    $$(".auth-close", dialog).forEach(function (button) {
      button.addEventListener("click", function () {
        if (typeof dialog.close === "function") dialog.close(); else dialog.removeAttribute("open");
      });
    });
  }

  $$("form.scheme").forEach(function (form) {
    var error = $(".auth-error", form);
    var name = form.dataset.scheme;
    var value = function (field) { var input = form.elements[field]; return input ? input.value.trim() : ""; };
    function fail(message) { error.hidden = false; error.textContent = message; }
    function done(credential) {
      if (auth[name] && auth[name]["in"] === "cookie") setCookie(auth[name], true);
      auth[name] = credential;
      if (credential["in"] === "cookie") setCookie(credential, false);
      saveAuth();
    }
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      error.hidden = true;
      var type = form.dataset.type, scheme = form.dataset.httpScheme;
      if (type === "apiKey") {
        if (!value("token")) return fail("Fill in the key.");
        return done({ "in": form.dataset["in"], key: form.dataset.key, value: value("token") });
      }
      if (type === "http" && scheme === "basic") {
        if (!value("username")) return fail("Fill in the username and password.");
        var pair = value("username") + ":" + form.elements.password.value;
        return done({ "in": "header", key: "Authorization", value: "Basic " + btoa(unescape(encodeURIComponent(pair))) });
      }
      if (type === "http" && scheme !== "bearer") {
        if (!value("token")) return fail("Fill in the credentials.");
        return done({ "in": "header", key: "Authorization", value: scheme.charAt(0).toUpperCase() + scheme.slice(1) + " " + value("token") });
      }
      if (value("token")) return done({ "in": "header", key: "Authorization", value: "Bearer " + value("token") });
      if (!form.dataset.tokenUrl) return fail("Fill in the token.");
      if (!value("username")) return fail("Fill in the username and password, or a token.");
      // OAuth2's password flow: trade them for a token at the scheme's token URL.
      var body = new URLSearchParams();
      body.set("grant_type", "password");
      body.set("username", value("username"));
      body.set("password", form.elements.password.value);
      var scopes = $$('input[name="scope"]:checked', form).map(function (c) { return c.value; });
      if (scopes.length) body.set("scope", scopes.join(" "));
      var url = new URL(form.dataset.tokenUrl, location.origin + "/").href;
      fetch(url, { method: "POST", headers: { accept: "application/json" }, body: body }).then(function (response) {
        return response.text().then(function (text) {
          var data = null;
          try { data = JSON.parse(text); } catch (e) { /* not JSON */ }
          if (!response.ok || !data || typeof data.access_token !== "string") {
            var detail = data && data.detail !== undefined
              ? (typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail)) : text;
            return fail("The token URL answered " + response.status + ": " + detail);
          }
          done({ "in": "header", key: "Authorization", value: "Bearer " + data.access_token });
        });
      }).catch(function (err) { fail("The token request failed: " + err.message); });
    });
    $(".auth-clear", form).addEventListener("click", function () {
      if (auth[name] && auth[name]["in"] === "cookie") setCookie(auth[name], true);
      delete auth[name];
      form.reset();
      error.hidden = true;
      saveAuth();
    });
  });
  refreshAuth();

  // Try it.
  function encodePath(value, catchAll) {
    if (!catchAll) return encodeURIComponent(value);
    return value.replace(/^\/+|\/+$/g, "").split("/").map(encodeURIComponent).join("/");
  }

  // The request a form describes: {method, url, body} or {error, field}.
  function build(form) {
    var method = form.dataset.method;
    var path = form.dataset.path;
    var query = [];
    var headers = {};
    var error = null;
    $$("[name]", form).forEach(function (field) {
      field.classList.remove("invalid");
      var parts = field.name.split(":");
      var where = parts[0], name = parts.slice(1).join(":");
      var value = field.value.trim();
      var shape = field.dataset.shape;
      if (where === "path") {
        if (shape === "optional_catch_all") {
          path = path.replace("/{" + name + "}", value ? "/" + encodePath(value, true) : "");
          if (path === "") path = "/";
        } else {
          if (!value && !error) { error = { message: "Fill in the path parameter " + name + ".", field: field }; }
          path = path.replace("{" + name + "}", encodePath(value, shape === "catch_all"));
        }
      } else if (where === "header" && value !== "") {
        headers[name] = value;
      } else if (where === "query" && value !== "") {
        var values = shape === "list" ? value.split(",").map(function (v) { return v.trim(); }) : [value];
        values.forEach(function (v) { query.push(encodeURIComponent(name) + "=" + encodeURIComponent(v)); });
      }
    });
    // The credentials of the schemes the operation requires, when authorized; a header the
    // form sets itself wins.
    var cookies = [];
    needs(form).forEach(function (name) {
      var credential = auth[name];
      if (!credential) return;
      var where = credential["in"];
      var taken = Object.keys(headers).some(function (h) { return h.toLowerCase() === credential.key.toLowerCase(); });
      if (where === "header" && !taken) headers[credential.key] = credential.value;
      else if (where === "query") query.push(encodeURIComponent(credential.key) + "=" + encodeURIComponent(credential.value));
      else if (where === "cookie") cookies.push(credential.key + "=" + encodeURIComponent(credential.value));
    });
    var bodyField = $("textarea[name=body]", form);
    var body = bodyField ? bodyField.value.trim() : "";
    var type = (bodyField && bodyField.dataset.contentType) || "application/json";
    if (body && !error && type.indexOf("json") !== -1) {
      try { JSON.parse(body); } catch (e) { error = { message: "The body is not valid JSON: " + e.message, field: bodyField }; }
    }
    return { method: method, url: path + (query.length ? "?" + query.join("&") : ""), body: body || null, type: type, headers: headers, cookies: cookies, error: error };
  }

  function curl(req) {
    var quote = function (s) { return "'" + s.replace(/'/g, "'\\''") + "'"; };
    var cmd = "curl -X " + req.method + " " + quote(location.origin + req.url);
    Object.keys(req.headers || {}).forEach(function (name) { cmd += " -H " + quote(name + ": " + req.headers[name]); });
    if (req.cookies && req.cookies.length) cmd += " -b " + quote(req.cookies.join("; "));
    if (req.body) cmd += " -H " + quote("content-type: " + req.type) + " -d " + quote(req.body);
    return cmd;
  }

  function element(tag, className, text) {
    var el = document.createElement(tag);
    if (className) el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function show(form, req, response, text, elapsed) {
    var result = $(".result", form);
    result.hidden = false;
    result.textContent = "";
    var head = element("div", "head");
    var status = element("span", "status s" + String(response.status).charAt(0), response.status + " " + (response.statusText || ""));
    head.appendChild(status);
    head.appendChild(element("span", "muted", req.method + " " + req.url));
    head.appendChild(element("span", "muted", Math.round(elapsed) + " ms"));
    result.appendChild(head);
    var headers = element("details");
    headers.appendChild(element("summary", "", "Response headers"));
    var lines = [];
    response.headers.forEach(function (value, name) { lines.push(name + ": " + value); });
    headers.appendChild(element("pre", "headers", lines.join("\n")));
    result.appendChild(headers);
    var body = text;
    var type = response.headers.get("content-type") || "";
    if (type.indexOf("json") !== -1 && text) {
      try { body = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* show as sent */ }
    }
    result.appendChild(element("pre", "body", body === "" ? "(no body)" : body));
  }

  $$("form.try").forEach(function (form) {
    var urlLine = $(".url", form);
    function preview() { var req = build(form); urlLine.textContent = req.method + " " + req.url; }
    form.addEventListener("input", preview);
    preview();
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var req = build(form);
      var result = $(".result", form);
      if (req.error) {
        result.hidden = false;
        result.textContent = "";
        result.appendChild(element("div", "error", req.error.message));
        req.error.field.classList.add("invalid");
        req.error.field.focus();
        return;
      }
      var button = $("button[type=submit]", form);
      button.disabled = true;
      var started = performance.now();
      var init = { method: req.method, headers: { accept: "application/json" } };
      Object.keys(req.headers).forEach(function (name) { init.headers[name] = req.headers[name]; });
      if (req.body) { init.body = req.body; init.headers["content-type"] = req.type; }
      fetch(req.url, init).then(function (response) {
        return response.text().then(function (text) { show(form, req, response, text, performance.now() - started); });
      }).catch(function (err) {
        result.hidden = false;
        result.textContent = "";
        result.appendChild(element("div", "error", "The request failed: " + err.message));
      }).then(function () { button.disabled = false; });
    });
    var copy = $(".copy-curl", form);
    copy.addEventListener("click", function () {
      var cmd = curl(build(form));
      var done = function () { copy.textContent = "Copied"; setTimeout(function () { copy.textContent = "Copy as curl"; }, 1200); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(cmd).then(done, function () { window.prompt("curl command", cmd); });
      } else {
        window.prompt("curl command", cmd);
      }
    });
  });
})();
