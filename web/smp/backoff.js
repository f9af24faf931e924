// Reconnection delays: exponential, bounded, with jitter.
//
// After the n-th failed attempt in a row the agent waits delay(n): the ceiling
// initial * factor^n, capped at maximum, less a random part of at most `jitter`
// of it. The random part spreads the clients that lost the same router at the
// same moment, so they do not all come back in one burst.

export class Backoff {
  /**
   * @param {{initial?: number, maximum?: number, factor?: number, jitter?: number}} [options]
   *   in milliseconds: the first delay, the cap, the growth per attempt, the spread (0..1)
   */
  constructor({ initial = 500, maximum = 30000, factor = 2, jitter = 0.5 } = {}) {
    if (!(initial > 0 && initial <= maximum && Number.isFinite(maximum))) {
      throw new RangeError("backoff needs 0 < initial <= maximum < Infinity");
    }
    if (!(factor >= 1)) throw new RangeError("backoff factor must be at least 1");
    if (!(jitter >= 0 && jitter <= 1)) throw new RangeError("backoff jitter must be within 0..1");
    this.initial = initial;
    this.maximum = maximum;
    this.factor = factor;
    this.jitter = jitter;
  }

  /** The longest delay (ms) after `attempt` (0-based) failures in a row. */
  ceiling(attempt) {
    return Math.min(this.maximum, this.initial * this.factor ** Math.min(Math.max(attempt, 0), 64));
  }

  /** A delay (ms) in [ceiling * (1 - jitter), ceiling] for `attempt`. */
  delay(attempt, random = Math.random) {
    const ceiling = this.ceiling(attempt);
    return ceiling - ceiling * this.jitter * random();
  }
}
