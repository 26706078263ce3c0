import type { Command } from 'commander';
import type { StoreFlags } from './backup-actions.js';

// The `platform backup` commands; what they run is in backup-actions.ts, loaded when one runs (a
// client command loads no store, schema or server module).

const actions = () => import('./backup-actions.js');

export function addBackupCommands(program: Command, addEtcdFlags: (command: Command) => Command): void {
  const backup = program.command('backup').description('Back up and restore the platform\'s own state (docs/operations.md).');
  const withStoreFlags = (command: Command) =>
    addEtcdFlags(command).option('--data-dir <dir>', 'embedded store directory when no --etcd is given; stop `platform up` first (env PLATFORM_DATA_DIR)');
  withStoreFlags(backup.command('create').description('Write everything under /platform/ at one store revision to a file readable by you only.'))
    .requiredOption('--out <file>', 'the backup file (replaced whole, atomically)')
    .action(async (flags: StoreFlags & { out: string }) => (await actions()).create(flags));
  backup
    .command('verify <file>')
    .description('Check a backup: checksum, versions, a restore into a scratch store, every record against its schema; exit 1 naming the first bad one.')
    .action(async (file: string) => (await actions()).verify(file));
  const restoreCommand = backup
    .command('restore <file>')
    .description('Write a backup into an empty store; the roles start on it afterwards and adopt the running units.');
  withStoreFlags(restoreCommand)
    .option('--force', 'delete everything the store holds under /platform/ first')
    .action(async (file: string, flags: StoreFlags & { force?: boolean }) => (await actions()).restore(file, flags));
}
