import type { FastifyBaseLogger } from 'fastify';
import type { RoleServer } from '../../../http/server.js';
import type { Store } from '../../../store/store.js';
import type { WebhookSecrets } from '../../../config.js';
import { openHookWarning, type HookSecret } from './auth.js';
import { isLoopback } from '../../../auth/caller.js';
import { countFailure } from '../../../auth/guard.js';
import { DeliveryLog, type DeliveryLogOptions } from './deliveries.js';
import type { Deployer, HookContext } from './dispatch.js';
import { registerRegistryHook } from './registry-hook.js';
import { registerDockerHubHook } from './dockerhub-hook.js';
import { registerGitHubHook } from './github-hook.js';

// The three registry webhooks of the scheduler, each in its own Fastify scope so that its body
// parsers (the registry's media type, GitHub's raw bytes) apply to it alone.

export interface WebhookOptions {
  deployer: Deployer;
  store: Store;
  log: FastifyBaseLogger;
  secrets: WebhookSecrets;
  /** The address the scheduler listens on: unauthenticated calls are accepted only on loopback. */
  listenHost: string;
  /** Largest accepted body (default 1 MiB; 413 above). */
  bodyLimit?: number;
  deliveries?: DeliveryLogOptions;
}

export async function registerWebhooks(server: RoleServer, options: WebhookOptions): Promise<void> {
  const listenerLoopback = isLoopback(options.listenHost);
  const context: HookContext = {
    dispatch: { deployer: options.deployer, store: options.store, deliveries: new DeliveryLog(options.store, options.deliveries), log: options.log },
    listenerLoopback,
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
  };
  const { registryToken, dockerHubToken, gitHubSecret } = options.secrets;
  const hooks: [HookSecret, (scope: RoleServer, context: HookContext, secret: HookSecret) => void][] = [
    [{ hook: 'registry', secret: registryToken, setting: 'PLATFORM_REGISTRY_WEBHOOK_TOKEN (or --registry-webhook-token)' }, registerRegistryHook],
    [{ hook: 'dockerhub', secret: dockerHubToken, setting: 'PLATFORM_DOCKERHUB_WEBHOOK_TOKEN (or --dockerhub-webhook-token)' }, registerDockerHubHook],
    [{ hook: 'github', secret: gitHubSecret, setting: 'PLATFORM_GITHUB_WEBHOOK_SECRET (or --github-webhook-secret)' }, registerGitHubHook],
  ];
  const warnings: string[] = [];
  for (const [secret, register] of hooks) {
    await server.register(async (scope) => {
      // Each hook checks its own secret; API tokens do not apply to it. It journals its deliveries itself.
      scope.addHook('onRoute', (route) => {
        route.config = { ...route.config, access: 'open', audit: false };
      });
      // A wrong secret (in its header, its URL or its body's signature) counts as a failed authentication, as a wrong token does.
      scope.addHook('onError', async (request, _reply, error) => {
        if (error.statusCode === 401) await countFailure(scope.accessControl, request);
      });
      register(scope, context, secret);
    });
    const warning = openHookWarning(secret, `POST /hooks/${secret.hook}`, listenerLoopback);
    if (warning) warnings.push(warning);
  }
  if (warnings.length > 0) options.log.warn(`webhooks without a secret: ${warnings.join('; ')}`);
}
