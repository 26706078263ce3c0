// A route's key in the API table (api.ts) is its method and path: `GET /services/:name`. A request
// is made from the key and the values of its parameters. This module imports nothing, so the
// dashboard loads it as it is, as the CLI client does.

export type RouteMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
export type RouteKey = `${RouteMethod} /${string}`;

type MethodOf<K extends RouteKey> = K extends `${infer M extends RouteMethod} /${string}` ? M : never;

/** The method and the path template, as the server registers them. */
export function splitRouteKey<K extends RouteKey>(key: K): { method: MethodOf<K>; url: string } {
  const space = key.indexOf(' ');
  return { method: key.slice(0, space) as MethodOf<K>, url: key.slice(space + 1) };
}

/** `?name=value&…` of the values that are set, or nothing when none is. */
export function queryString(values: Record<string, unknown>): string {
  const set = Object.entries(values).filter(([, value]) => value !== undefined);
  return set.length ? `?${new URLSearchParams(set.map(([name, value]): [string, string] => [name, String(value)])).toString()}` : '';
}

/** The method and the path of a call: the template's `:name`s filled in, the query appended. */
export function requestLine(key: RouteKey, params: Record<string, string | number> = {}, query: Record<string, unknown> = {}): { method: RouteMethod; path: string } {
  const { method, url } = splitRouteKey(key);
  const path = url.replace(/:(\w+)/g, (_match, name: string) => encodeURIComponent(String(params[name])));
  return { method, path: `${path}${queryString(query)}` };
}
