// The engine's in-memory store: the module's arithmetic without a server, for tests and
// offline replay. `call(args, nowUs)` answers in the reply JSON of clients/vectors/README.md.
import { engine } from './native.js';

export class MemoryStore {
  constructor() {
    this.store = new (engine().MemoryStore)();
  }

  call(args, nowUs) {
    return this.store.call(args.map(String), nowUs);
  }
}
