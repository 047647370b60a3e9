// The template editor's live preview: the words as typed go to the console's preview route,
// which renders them in the same sandbox sends use; the answer fills the preview. Tenant
// HTML goes into a sandboxed frame (no scripts, opaque origin), text into textContent only.
(function () {
  "use strict";
  var form = document.getElementById("editor");
  if (!form) { return; }
  var token = document.querySelector('meta[name="csrf-token"]').content;
  var timer = null;
  var sent = 0;

  function show(id, text) { document.getElementById(id).textContent = text || ""; }

  function fields() {
    var out = {};
    form.querySelectorAll("input[name], textarea[name]").forEach(function (el) {
      if (el.name !== "csrf_token") { out[el.name] = el.value; }
    });
    return out;
  }

  function render(answer) {
    var error = document.getElementById("preview-error");
    error.hidden = true;
    show("preview-subject", answer.subject || answer.title);
    show("preview-text", answer.text || answer.body);
    show("preview-sms", answer.segments ? answer.length + " characters (" + answer.encoding + "), " +
      answer.segments + " segment" + (answer.segments === 1 ? "" : "s") : "");
    document.getElementById("preview-html").srcdoc = answer.html || "";
  }

  function fail(answer) {
    var error = document.getElementById("preview-error");
    error.hidden = false;
    error.textContent = answer.message + (answer.errors ? " " + JSON.stringify(answer.errors) : "");
  }

  function preview() {
    var data;
    try { data = JSON.parse(document.getElementById("sample").value || "{}"); }
    catch (e) { fail({message: "The sample data is not JSON."}); return; }
    var mine = ++sent;
    fetch(form.dataset.preview, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": token},
      body: JSON.stringify({fields: fields(), data: data})
    }).then(function (response) {
      return response.json().then(function (answer) {
        if (mine !== sent) { return; }  // a newer keystroke's answer is on its way
        if (response.ok) { render(answer); } else { fail(answer); }
      });
    });
  }

  form.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(preview, 250); });
  preview();
}());
