/**
 * Adds `hook` to a route's own hooks of that kind (in an onRoute hook), after any it declares: a
 * hook only the routes that need it run, where a global one costs every call a pass of Fastify's
 * hook runner.
 */
export function appendHook<H>(existing: H | H[] | undefined, hook: H): H[] {
  return existing === undefined ? [hook] : [...(Array.isArray(existing) ? existing : [existing]), hook];
}
