import t from 'tap';
import { HOST_PATH, withoutHostPaths } from '../../src/roles/agent/host-paths.js';

t.test("an engine's paths are replaced in a unit's error; the container's own paths stay", async (t) => {
  const root = '/tmp/pd-0inMNB/data';
  t.equal(
    withoutHostPaths(`source ${root}/overlay2/fc00e7/merged/bin/busybox is not directory`, [root]),
    `source ${HOST_PATH} is not directory`,
    'the data root the engine reported',
  );
  t.equal(
    withoutHostPaths('error mounting "/var/lib/docker/volumes/web-1-data/_data" to rootfs at "/data": not a directory', []),
    `error mounting "${HOST_PATH}" to rootfs at "/data": not a directory`,
    "the default data root, in quotes; the container's path stays",
  );
  t.equal(withoutHostPaths('open /run/containerd/io.containerd.runtime.v2.task/moby/abc/log.json: no such file', []), `open ${HOST_PATH}: no such file`);
  t.equal(withoutHostPaths('exec: "/app/start": stat /app/start: no such file or directory', []), 'exec: "/app/start": stat /app/start: no such file or directory');
  t.equal(withoutHostPaths('/var/lib/dockerish/x and /procfs stay', []), '/var/lib/dockerish/x and /procfs stay', 'only whole directory names match');
  t.equal(withoutHostPaths(`at ${root}`, [`${root}/`]), `at ${HOST_PATH}`, 'the directory itself, given with a trailing slash');
});
