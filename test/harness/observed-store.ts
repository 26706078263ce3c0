import type { Store } from '../../src/store/store.js';

/**
 * The store, with `observe` told of each call once it returned: its method, arguments and result.
 * Unit tests count what a piece of code reads or writes with it (keys a deploy reads, writes of a
 * deployment record).
 */
export function observedStore(store: Store, observe: (method: string, args: unknown[], result: unknown) => void): Store {
  return new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        observe(String(property), args, result);
        return result;
      };
    },
  });
}
