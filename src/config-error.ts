/** A flag or environment value the platform refuses: the CLI prints its message and exits 2. */
export class ConfigError extends Error {}
