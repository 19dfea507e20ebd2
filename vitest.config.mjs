// Vitest for js/*.test.ts under happy-dom. Stylesheets are imported as text, as esbuild's
// `import css from "./x.css" with { type: "text" }` does in the bundle.
import { readFileSync } from "node:fs";
import { resolve, dirname } from "node:path";
import { defineConfig } from "vitest/config";

const PREFIX = "\0calwatch-css-text:";

const cssAsText = {
  name: "calwatch-css-as-text",
  enforce: "pre",
  resolveId(source, importer) {
    if (!source.endsWith(".css") || importer === undefined) return null;
    // A suffix that is not ".css", so Vite's own CSS pipeline leaves the module alone.
    return `${PREFIX}${resolve(dirname(importer), source)}.js`;
  },
  load(id) {
    if (!id.startsWith(PREFIX)) return null;
    const file = id.slice(PREFIX.length, -".js".length);
    return `export default ${JSON.stringify(readFileSync(file, "utf8"))};`;
  },
};

export default defineConfig({
  plugins: [cssAsText],
  test: {
    environment: "happy-dom",
    include: ["js/**/*.test.ts"],
  },
});
