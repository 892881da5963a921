// waitgraph live view: ask for the graph at once, while the graph library and liveview.js load
// (they are deferred); liveview.js takes this first answer. It asks for the cycles' neighbourhood
// (the focus), not the whole graph: on a large replica that is what the first drawing needs, and
// the first drawing need not wait for the scripts as well. It asks for a build at least as new as
// the commit index the page was served at (?since=): a build kept ready while no page was open can
// be seconds older than the page, and lack the cycle the operator came for.
"use strict";
{
  const servedAt = document.querySelector('meta[name="waitgraph-commit-index"]')?.content;
  window.liveviewFirstGraph = {
    askedAt: performance.now(),
    reply: fetch(`/api/graph?part=focus${servedAt ? `&since=${encodeURIComponent(servedAt)}` : ""}`, {
      cache: "no-store",
      credentials: "same-origin",
    }),
  };
}
