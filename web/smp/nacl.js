// The one place that finds tweetnacl (npm package "tweetnacl" 1.0.3).
//
// In a browser the library is the classic script nacl-fast.js, which sets
// `window.nacl`: a page may load it itself, otherwise this module adds the
// script from /vendor/tweetnacl/nacl-fast.js next to /smp/ (the layout the
// gateway serves). In Node it is imported from node_modules.

async function loadInBrowser() {
  const src = new URL("../vendor/tweetnacl/nacl-fast.js", import.meta.url).href;
  await new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = src;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`cannot load tweetnacl from ${src}`));
    document.head.appendChild(script);
  });
  if (!globalThis.nacl) throw new Error(`${src} did not define nacl`);
  return globalThis.nacl;
}

async function load() {
  if (globalThis.nacl) return globalThis.nacl;
  if (typeof document !== "undefined") return loadInBrowser();
  const name = "tweetnacl"; // a variable, so that browsers never try to resolve it
  return (await import(name)).default;
}

const nacl = await load();
export default nacl;
