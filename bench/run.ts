// `npm run bench`: every benchmark script in turn.
await import('./spine.js');
