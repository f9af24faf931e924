// The small key-value storage the durable subscription keeps its state in.
//
// Interface (every method returns a Promise):
//   get(key) -> value or undefined;  put(key, value);  delete(key);
//   putMany([[key, value], ...]) -> all of them or none (one transaction);
//   keys(prefix) -> the keys starting with `prefix`, sorted.
// Values are anything structured clone copies (objects, arrays, Uint8Arrays).
// IndexedDBStore keeps them across page reloads; MemoryStore is the same
// interface in memory, for Node and for tests (one instance shared by two
// clients stands for a page that reloads).

export class MemoryStore {
  constructor() {
    this.map = new Map();
  }

  /**
   * @param {string} key
   * @returns {Promise<any>}
   */
  async get(key) {
    const value = this.map.get(key);
    return value === undefined ? undefined : structuredClone(value);
  }

  /**
   * @param {string} key
   * @param {any} value
   */
  async put(key, value) {
    this.map.set(key, structuredClone(value));
  }

  /**
   * @param {[string, any][]} entries
   */
  async putMany(entries) {
    const copies = entries.map(([key, value]) => [key, structuredClone(value)]);
    for (const [key, value] of copies) this.map.set(key, value);
  }

  /**
   * @param {string} key
   */
  async delete(key) {
    this.map.delete(key);
  }

  /**
   * @param {string} [prefix]
   * @returns {Promise<string[]>}
   */
  async keys(prefix = "") {
    return [...this.map.keys()].filter((k) => k.startsWith(prefix)).sort();
  }
}

const OBJECT_STORE = "kv";

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

export class IndexedDBStore {
  constructor(db) {
    this.db = db;
  }

  /**
   * Open (or create) the database `name` in this origin's IndexedDB.
   * @param {string} [name]
   * @param {IDBFactory} [indexedDB]
   * @returns {Promise<IndexedDBStore>}
   */
  static async open(name = "smp-client", indexedDB = globalThis.indexedDB) {
    if (!indexedDB) throw new Error("IndexedDB is not available here");
    const req = indexedDB.open(name, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(OBJECT_STORE);
    return new IndexedDBStore(await request(req));
  }

  /**
   * Run `fn(objectStore)` in one transaction; the result of the request it returns.
   * @private
   */
  run(mode, fn) {
    return new Promise((resolve, reject) => {
      const tx = this.db.transaction(OBJECT_STORE, mode);
      let req;
      try {
        req = fn(tx.objectStore(OBJECT_STORE));
      } catch (error) {
        // A value that cannot be stored throws at put(): abort, or the puts
        // before it would commit without it.
        tx.abort();
        reject(error);
        return;
      }
      tx.oncomplete = () => resolve(req?.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error("transaction aborted"));
    });
  }

  get(key) {
    return this.run("readonly", (s) => s.get(key));
  }

  async put(key, value) {
    await this.run("readwrite", (s) => s.put(value, key));
  }

  async putMany(entries) {
    await this.run("readwrite", (s) => {
      for (const [key, value] of entries) s.put(value, key);
      return null;
    });
  }

  async delete(key) {
    await this.run("readwrite", (s) => s.delete(key));
  }

  async keys(prefix = "") {
    // '\uffff' sorts after every character a key here uses.
    const range = IDBKeyRange.bound(prefix, `${prefix}\uffff`);
    return this.run("readonly", (s) => s.getAllKeys(range));
  }

  close() {
    this.db.close();
  }
}
