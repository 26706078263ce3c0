import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkQueue, type WorkQueueOptions } from '../../src/work-queue.js';

// The work queue every reacting loop runs its passes on (src/work-queue.ts): per key, a trigger
// during a pass causes exactly one more pass, never two at once; triggers while waiting are one
// pass; keys run side by side; failed passes back off, doubling up to a cap, until one succeeds.

/** A pass the test ends when it chooses. */
interface Held {
  key: string;
  release: () => void;
  fail: (error: Error) => void;
}

/** A queue whose passes are recorded and held until the test releases them. */
function heldQueue(options: Partial<WorkQueueOptions> = {}) {
  const started: Held[] = [];
  const errors: { key: string; message: string }[] = [];
  let runningNow = 0;
  let mostAtOnce = 0;
  const queue = new WorkQueue({
    run: (key) =>
      new Promise<void>((resolve, reject) => {
        runningNow++;
        mostAtOnce = Math.max(mostAtOnce, runningNow);
        const end = () => runningNow--;
        started.push({ key, release: () => (end(), resolve()), fail: (error) => (end(), reject(error)) });
      }),
    onError: (error, key) => errors.push({ key, message: (error as Error).message }),
    ...options,
  });
  /** Waits until `count` passes have started. */
  const passes = async (count: number): Promise<Held[]> => {
    for (let i = 0; i < 200 && started.length < count; i++) await sleep(5);
    return started;
  };
  return { queue, started, errors, passes, mostAtOnce: () => mostAtOnce };
}

/** Lets every pending immediate and timer of a few milliseconds run. */
const settle = () => sleep(20);

t.test('a trigger during a pass causes exactly one more pass, after it, never two at once', async (t) => {
  const { queue, started, passes, mostAtOnce } = heldQueue();
  void queue.add('cluster');
  const [first] = await passes(1);
  void queue.add('cluster');
  void queue.add('cluster');
  void queue.add('cluster');
  await settle();
  t.equal(started.length, 1, 'no second pass while the first runs');
  first!.release();
  const [, second] = await passes(2);
  t.ok(second, 'one more pass after it');
  second!.release();
  await queue.idle();
  await settle();
  t.equal(started.length, 2, 'exactly one more: three triggers during the pass are one');
  t.equal(mostAtOnce(), 1, 'never two passes of the key at once');
  await queue.close();
});

t.test('a trigger after a pass ended causes a pass of its own', async (t) => {
  const { queue, started, passes } = heldQueue();
  const one = queue.add('k');
  (await passes(1))[0]!.release();
  await one;
  void queue.add('k');
  (await passes(2))[1]!.release();
  await queue.idle();
  t.equal(started.length, 2);
  await queue.close();
});

t.test('triggers of a key waiting to start are one pass', async (t) => {
  const { queue, started, passes } = heldQueue();
  for (let i = 0; i < 5; i++) void queue.add('k');
  (await passes(1))[0]!.release();
  await queue.idle();
  await settle();
  t.equal(started.length, 1, 'five triggers in one turn, one pass');
  await queue.close();
});

t.test('add resolves once a pass that started after it has ended, not the one running when it was called', async (t) => {
  const { queue, passes } = heldQueue();
  const before = queue.add('k');
  const [first] = await passes(1);
  let duringDone = false;
  const during = queue.add('k').then(() => (duringDone = true));
  first!.release();
  await before;
  await settle();
  t.notOk(duringDone, 'the trigger made during the first pass still waits');
  const [, second] = await passes(2);
  second!.release();
  await during;
  t.ok(duringDone, 'and is answered by the second');
  await queue.close();
});

t.test('keys run side by side: one held pass does not hold another key', async (t) => {
  const { queue, passes, mostAtOnce } = heldQueue();
  void queue.add('a');
  void queue.add('b');
  const [first, second] = await passes(2);
  t.same([first!.key, second!.key].sort(), ['a', 'b'], 'both started');
  t.equal(mostAtOnce(), 2);
  t.ok(queue.busy('a') && queue.busy('b'));
  const bDone = queue.add('b');
  (first!.key === 'b' ? first! : second!).release();
  const third = (await passes(3))[2]!;
  t.equal(third.key, 'b', 'b runs again while a is still held');
  third.release();
  await bDone;
  t.ok(queue.busy('a'), 'a is still running');
  t.notOk(queue.busy('b'), 'b is done');
  (first!.key === 'a' ? first! : second!).release();
  await queue.idle();
  await queue.close();
});

t.test('a failed pass is told to onError; without a retry policy the key waits for the next trigger', async (t) => {
  const { queue, started, errors, passes } = heldQueue();
  const done = queue.add('k');
  (await passes(1))[0]!.fail(new Error('store down'));
  await done;
  t.same(errors, [{ key: 'k', message: 'store down' }]);
  t.equal(queue.failuresOf('k'), 1);
  await sleep(50);
  t.equal(started.length, 1, 'no retry of its own');
  void queue.add('k');
  (await passes(2))[1]!.release();
  await queue.idle();
  t.equal(queue.failuresOf('k'), 0, 'a pass that succeeds forgets the failures');
  await queue.close();
});

t.test('failed passes are retried after a wait doubling per failure up to the cap, and a success resets it', async (t) => {
  const { queue, started, passes } = heldQueue({ retry: { firstMs: 40, maxMs: 120 } });
  const endedAt: number[] = [];
  const failNext = async (index: number) => {
    const pass = (await passes(index + 1))[index]!;
    endedAt.push(Date.now());
    pass.fail(new Error(`failure ${index + 1}`));
  };
  const startedAt: number[] = [];
  void queue.add('k');
  for (let i = 0; i < 4; i++) {
    await failNext(i);
    await passes(i + 2);
    startedAt.push(Date.now());
  }
  const waits = startedAt.map((at, i) => at - endedAt[i]!);
  t.comment(`waits between a failure and its retry: ${waits.join(', ')} ms`);
  // Timers never fire early; polling every 5 ms may see a start up to a few ms late.
  t.ok(waits[0]! >= 38, `first retry after 40 ms (${waits[0]})`);
  t.ok(waits[1]! >= 78, `second after 80 ms (${waits[1]})`);
  t.ok(waits[2]! >= 118, `third capped at 120 ms (${waits[2]})`);
  t.ok(waits[3]! >= 118 && waits[3]! < 240, `fourth still 120 ms (${waits[3]})`);
  t.equal(queue.failuresOf('k'), 4);
  started[4]!.release();
  await queue.idle();
  t.equal(queue.failuresOf('k'), 0, 'the success forgets the failures');
  void queue.add('k');
  const at = Date.now();
  (await passes(6))[5]!.fail(new Error('again'));
  await passes(7);
  t.ok(Date.now() - at < 110, 'the next failure waits the first 40 ms again, not 240');
  started[6]!.release();
  await queue.idle();
  await queue.close();
});

t.test('a trigger during a backoff runs at once: new work never waits out the wait', async (t) => {
  const { queue, passes } = heldQueue({ retry: { firstMs: 5_000, maxMs: 5_000 } });
  void queue.add('k');
  (await passes(1))[0]!.fail(new Error('down'));
  await settle();
  const at = Date.now();
  void queue.add('k');
  const second = (await passes(2))[1]!;
  t.ok(Date.now() - at < 1000, 'started without waiting 5 s');
  second.release();
  await queue.idle();
  await queue.close();
});

t.test('addAfter runs the key later; of two asks the earliest is kept', async (t) => {
  const { queue, started, passes } = heldQueue();
  const at = Date.now();
  queue.addAfter('k', 200);
  queue.addAfter('k', 60);
  queue.addAfter('k', 100);
  (await passes(1))[0]!.release();
  const waited = Date.now() - at;
  t.ok(waited >= 58 && waited < 190, `it ran after the earliest, 60 ms (${waited} ms)`);
  await sleep(250);
  t.equal(started.length, 1, 'once');
  await queue.close();
});

t.test('close waits for the running pass, answers the waiting triggers, starts nothing more', async (t) => {
  const { queue, started, passes } = heldQueue({ retry: { firstMs: 10, maxMs: 10 } });
  void queue.add('k');
  const [first] = await passes(1);
  const waiting = queue.add('k');
  queue.addAfter('later', 20);
  let closed = false;
  const closing = queue.close().then(() => (closed = true));
  await waiting;
  t.pass('the trigger waiting for a next pass is answered by the close');
  await settle();
  t.notOk(closed, 'close waits for the pass in progress');
  first!.fail(new Error('failed while closing'));
  await closing;
  await sleep(60);
  t.equal(started.length, 1, 'no follow-up, retry or delayed pass after close');
  await queue.add('k');
  t.equal(started.length, 1, 'a trigger after close resolves at once and runs nothing');
});

t.test('a pass that throws synchronously is a failed pass like any other', async (t) => {
  const errors: string[] = [];
  const queue = new WorkQueue({
    run: () => {
      throw new Error('at once');
    },
    onError: (error) => errors.push((error as Error).message),
  });
  await queue.add('k');
  t.same(errors, ['at once']);
  await queue.close();
});
