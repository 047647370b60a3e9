// A batch's progress, live: its counts by status polled every two seconds from the console's
// JSON route, until nothing is left in flight or the page is left.
(function () {
  "use strict";
  var table = document.getElementById("progress");
  if (!table) { return; }
  var FINAL = ["sent", "delivered", "failed", "dead", "suppressed", "skipped", "cancelled", "bounced", "complained"];
  var body = table.querySelector("tbody");

  function row(status) {
    var found = body.querySelector('tr[data-status="' + status + '"]');
    if (found) { return found; }
    var tr = document.createElement("tr");
    tr.dataset.status = status;
    var name = document.createElement("td");
    name.textContent = status;
    var count = document.createElement("td");
    count.className = "count";
    tr.appendChild(name);
    tr.appendChild(count);
    body.appendChild(tr);
    return tr;
  }

  function update(counts) {
    body.querySelectorAll("tr[data-status]").forEach(function (tr) {
      if (!(tr.dataset.status in counts)) { tr.remove(); }
    });
    var inFlight = 0;
    Object.keys(counts).sort().forEach(function (status) {
      row(status).querySelector(".count").textContent = counts[status];
      if (FINAL.indexOf(status) < 0) { inFlight += counts[status]; }
    });
    return inFlight;
  }

  function poll() {
    fetch(table.dataset.progress, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) { return response.json(); })
      .then(function (answer) { if (update(answer.counts) > 0) { setTimeout(poll, 2000); } });
  }
  setTimeout(poll, 2000);
}());
