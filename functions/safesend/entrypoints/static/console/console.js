(function () {
  "use strict";
  // A decision form submits once: a double click, or a second tap while the first is on its way,
  // is stopped here (the server would replay it anyway, never apply it twice).
  document.querySelectorAll("form[data-once]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (form.getAttribute("data-sent") === "1") { event.preventDefault(); return; }
      form.setAttribute("data-sent", "1");
      form.classList.add("busy");
      form.querySelectorAll("button").forEach(function (b) { b.setAttribute("aria-disabled", "true"); });
      var chosen = event.submitter;
      if (chosen && chosen.getAttribute("data-busy")) { chosen.textContent = chosen.getAttribute("data-busy"); }
    });
  });
  // Filters apply as soon as one is chosen (the Filter button does the same without script).
  document.querySelectorAll("form[data-autosubmit] select").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });
})();
