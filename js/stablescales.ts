// Vega scale operators that stay quiet when a run leaves the scale as it was.
//
// Vega treats a scale operator as modified every time it runs ("always treat as modified", since
// the scale function is updated in place), and it runs whenever the data its domain is computed
// from changes. Every mark that encodes with that scale then re-encodes all of its items (a
// reflow) and the SVG renderer re-checks each of them, although the scale maps every value
// exactly as before. Streaming one row into a chart of 1,000 points thus costs as much as
// drawing the chart again. Wrapped here: after a run, a scale whose type, domain, range and
// other settings are all unchanged is marked unmodified and stops propagation, so dependants
// (marks, axes, legends) encode only the tuples that changed.

import { transforms } from "vega";

/** Getters whose values define what a scale maps (read when the scale has them). */
const SETTINGS = [
  "domain",
  "range",
  "clamp",
  "round",
  "unknown",
  "interpolate",
  "interpolator",
  "padding",
  "paddingInner",
  "paddingOuter",
  "align",
  "base",
  "exponent",
  "constant",
  "bandwidth",
  "step",
] as const;

type ScaleLike = Record<string, unknown> & { type?: unknown; bins?: unknown };

/** What `scale` maps, as a flat list of values comparable with `sameState` (null: no scale). */
export function scaleState(scale: unknown): unknown[] | null {
  if (typeof scale !== "function") return null;
  const s = scale as unknown as ScaleLike;
  const state: unknown[] = [s.type, Array.isArray(s.bins) ? [...(s.bins as unknown[])] : s.bins];
  for (const name of SETTINGS) {
    const getter = s[name];
    if (typeof getter !== "function") {
      state.push(undefined);
      continue;
    }
    const value: unknown = (getter as () => unknown).call(scale);
    state.push(Array.isArray(value) ? [...value] : value);
  }
  return state;
}

function sameValue(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((v, i) => Object.is(v, b[i]));
  }
  return Object.is(a, b);
}

/** True when two `scaleState`s are equal (element by element, arrays compared by their values). */
export function sameState(a: unknown[] | null, b: unknown[] | null): boolean {
  if (a === null || b === null || a.length !== b.length) return false;
  return a.every((v, i) => sameValue(v, b[i]));
}

interface ScaleOperator {
  value: unknown;
  modified(state: boolean): unknown;
}
interface PulseLike {
  StopPropagation: unknown;
}
type TransformFn = (this: ScaleOperator, params: unknown, pulse: PulseLike) => unknown;

const WRAPPED = Symbol.for("calwatch.stableScales");

/**
 * Installs the wrapper on Vega's `scale` transform (once; later calls do nothing). Returns
 * whether the transform was found.
 */
export function installStableScales(registry: Record<string, unknown> = transforms): boolean {
  const Scale = registry.scale as { prototype?: Record<PropertyKey, unknown> } | undefined;
  const proto = Scale?.prototype;
  if (proto === undefined || typeof proto.transform !== "function") return false;
  if (proto[WRAPPED] === true) return true;
  const original = proto.transform as TransformFn;
  proto.transform = function stableTransform(this: ScaleOperator, params: unknown, pulse: PulseLike): unknown {
    const before = scaleState(this.value);
    const out = original.call(this, params, pulse);
    if (out !== pulse.StopPropagation && sameState(before, scaleState(this.value))) {
      this.modified(false); // dependants read `_.modified("x")` as false: no reflow
      return pulse.StopPropagation;
    }
    this.modified(true);
    return out;
  };
  proto[WRAPPED] = true;
  return true;
}
