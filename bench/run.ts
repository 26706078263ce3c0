// `npm run bench`: every benchmark script in turn, each printing its own table.
await import('./planner.js');
await import('./spine.js');
await import('./releases.js');
await import('./release-command.js');
await import('./job-output.js');
await import('./cluster.js');
await import('./hosts.js');
await import('./webhooks.js');
await import('./gateway.js');
await import('./tls.js');
await import('./image.js');
await import('./auth.js');
await import('./backup.js');
await import('./restore-drill.js');
await import('./store-outage.js');
await import('./cli-startup.js');
await import('./handover.js');
