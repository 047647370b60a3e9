// Starts Swagger UI on /openapi.json. A file of its own, not an inline script, so the page's
// Content-Security-Policy can allow only scripts served by Tidings. No validator badge: it
// would send the spec to an outside service.
window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.spec,
    domNode: root,
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
