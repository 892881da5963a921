// waitgraph live view: ask for the graph at once, while the graph library and liveview.js load
// (they are deferred); liveview.js takes this first answer. It asks for the cycles' neighbourhood
// (the focus), not the whole graph: on a large replica that is what the first drawing needs, and
// the first drawing need not wait for the scripts as well.
"use strict";
window.liveviewFirstGraph = {
  askedAt: performance.now(),
  reply: fetch("/api/graph?part=focus", { cache: "no-store", credentials: "same-origin" }),
};
