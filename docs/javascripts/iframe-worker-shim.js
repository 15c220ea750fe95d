/* Search from file://: browsers refuse Web Workers loaded from file:// URLs, so there the theme's search
   worker runs in a hidden iframe instead (the protocol of mkdocs-material's "iframe-worker" shim, which
   its offline plugin would otherwise load from unpkg.com: this manual fetches nothing from the network).
   The worker script sees `parent.IFrameWorker`, calls postMessage / addEventListener("message") on its
   own window; messages cross through the parent. Only for file://; served sites use real workers. */
(function () {
  if (location.protocol !== "file:" || typeof window === "undefined") return;

  function IFrameWorker(url) {
    var self = this;
    var listeners = [];
    this.onmessage = null;
    this.onerror = null;
    this.addEventListener = function (type, fn) { if (type === "message") listeners.push(fn); };
    this.removeEventListener = function (type, fn) { listeners = listeners.filter(function (f) { return f !== fn; }); };
    var queue = [];
    var ready = false;
    var iframe = document.createElement("iframe");
    iframe.setAttribute("aria-hidden", "true");
    iframe.style.display = "none";
    iframe.src = "about:blank";
    (document.body || document.documentElement).appendChild(iframe);
    var win = iframe.contentWindow;
    var deliver = function (data) {
      var event = new MessageEvent("message", { data: data });
      if (typeof self.onmessage === "function") self.onmessage(event);
      listeners.forEach(function (fn) { fn(event); });
    };
    // inside the iframe the worker's postMessage goes to us; ours arrive as its message events
    win.postMessage = function (data) { setTimeout(function () { deliver(data); }, 0); };
    win.importScripts = function () {
      var urls = Array.prototype.slice.call(arguments);
      return urls.reduce(function (chain, src) {
        return chain.then(function () {
          return new Promise(function (resolve, reject) {
            var s = win.document.createElement("script");
            s.src = new URL(src, url).href; s.onload = resolve; s.onerror = reject;
            win.document.head.appendChild(s);
          });
        });
      }, Promise.resolve());
    };
    var script = win.document.createElement("script");
    script.src = url;
    script.onload = function () {
      ready = true;
      queue.splice(0).forEach(function (data) { self.postMessage(data); });
    };
    script.onerror = function (e) { if (typeof self.onerror === "function") self.onerror(e); };
    win.document.head.appendChild(script);
    this.postMessage = function (data) {
      if (!ready) { queue.push(data); return; }
      setTimeout(function () { win.dispatchEvent(new MessageEvent("message", { data: data })); }, 0);
    };
    this.terminate = function () { iframe.remove(); };
  }

  window.IFrameWorker = IFrameWorker;
  window.Worker = IFrameWorker;
})();
