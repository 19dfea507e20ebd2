// Stylesheets are bundled as text (esbuild `with { type: "text" }`; the vitest config mirrors it).
declare module "*.css" {
  const text: string;
  export default text;
}
