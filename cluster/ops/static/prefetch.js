// waitgraph live view: ask for the graph at once, while the graph library and liveview.js load
// (they are deferred); liveview.js takes this first answer. On a large replica the graph is the
// slowest thing the page needs, so the first drawing need not wait for the scripts as well.
"use strict";
window.liveviewFirstGraph = {
  askedAt: performance.now(),
  reply: fetch("/api/graph", { cache: "no-store", credentials: "same-origin" }),
};
