// The build: type declarations for the package, and the files the gateway serves.
//
//   node build.mjs        (npm run build; `npm ci` runs it as the `dependencies`
//                          script, `npm pack` as `prepack`: neither is run when
//                          the packed package is installed)
//
// types/            .d.ts of every module of smp/, from their JSDoc (tsc)
// dist/smp-client.js  the client as one minified ES module with its
//                     dependencies inside, for browsers (the package's
//                     "./bundle" export)
// dist/smp-client.node.js  the same for Node (the "node" condition of both
//                     exports): readable, with no require() of Node's crypto
// dist/site/        what `smp-router gateway` serves:
//   smp/index.js      the same bundle, at the stable URL pages import
//   demo/index.html   the demo page, naming its script and style by content hash
//   assets/           app-<hash>.js, style-<hash>.css: never change, cached for good
// Every file of dist/site has a gzip twin (name.gz) next to it, which the
// gateway sends to browsers that accept gzip.

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

import * as esbuild from "esbuild";

const WEB = dirname(fileURLToPath(import.meta.url));
const DIST = join(WEB, "dist");
const SITE = join(DIST, "site");
const TARGET = ["chrome111", "firefox115", "safari16.4"]; // browsers with top-level await and ES2022

function write(path, bytes) {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, bytes);
}

/** Write a file of the site and its gzip twin. */
function writeSite(relative, bytes) {
  write(join(SITE, relative), bytes);
  write(join(SITE, `${relative}.gz`), gzipSync(bytes, { level: 9 }));
}

function contentHash(bytes) {
  return createHash("sha256").update(bytes).digest("base64url").slice(0, 12);
}

async function bundle(entry) {
  const result = await esbuild.build({
    entryPoints: [join(WEB, entry)],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: TARGET,
    minify: true,
    legalComments: "none",
    write: false,
    logLevel: "warning",
  });
  return result.outputFiles[0].contents;
}

// tweetnacl falls back to `require("crypto")` when it finds no `self.crypto`;
// an ES module has no `require`, so a Node bundle keeping that call throws
// 'Dynamic require of "crypto"' when loaded. Its random bytes come from
// WebCrypto instead (smp/nacl.js), so the bundle gets an empty module there.
const withoutNodeCrypto = {
  name: "without-node-crypto",
  setup(build) {
    build.onResolve({ filter: /^(node:)?crypto$/ }, () => ({ path: "crypto", namespace: "without-node-crypto" }));
    build.onLoad({ filter: /.*/, namespace: "without-node-crypto" }, () => ({ contents: "module.exports = {};" }));
  },
};

async function nodeBundle(entry) {
  const result = await esbuild.build({
    entryPoints: [join(WEB, entry)],
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node20",
    minify: false, // an error's stack shows a readable line
    legalComments: "none",
    plugins: [withoutNodeCrypto],
    write: false,
    logLevel: "warning",
  });
  const code = result.outputFiles[0].text;
  if (/\brequire\(\s*["'](node:)?crypto["']\s*\)/.test(code) || code.includes("__require(")) {
    throw new Error("the Node bundle still requires a module at run time");
  }
  return result.outputFiles[0].contents;
}

function declarations() {
  rmSync(join(WEB, "types"), { recursive: true, force: true });
  const tsc = join(WEB, "node_modules", "typescript", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "-p", join(WEB, "tsconfig.build.json")], { stdio: "inherit" });
}

async function site() {
  rmSync(DIST, { recursive: true, force: true });
  const client = await bundle("smp/index.js");
  write(join(DIST, "smp-client.js"), client);
  write(join(DIST, "smp-client.node.js"), await nodeBundle("smp/index.js"));
  writeSite("smp/index.js", client);

  const app = await bundle("demo/app.js");
  const style = readFileSync(join(WEB, "demo", "style.css"));
  const appName = `assets/app-${contentHash(app)}.js`;
  const styleName = `assets/style-${contentHash(style)}.css`;
  writeSite(appName, app);
  writeSite(styleName, style);
  const page = readFileSync(join(WEB, "demo", "index.html"), "utf8");
  const built = page
    .replace('href="style.css"', `href="../${styleName}"`)
    .replace('src="app.js"', `src="../${appName}"`);
  if (built === page || built.includes('"app.js"') || built.includes('"style.css"')) {
    throw new Error("demo/index.html no longer names app.js and style.css as build.mjs expects");
  }
  writeSite("demo/index.html", new TextEncoder().encode(built));
  return { client: client.length, clientGzip: gzipSync(client, { level: 9 }).length, app: app.length };
}

declarations();
const sizes = await site();
console.log(
  `built types/ and dist/: client bundle ${sizes.client} bytes (${sizes.clientGzip} gzipped), demo ${sizes.app} bytes`,
);
