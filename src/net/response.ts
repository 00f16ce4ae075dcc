// The Response leanFetch answers with: the body already read whole (a Buffer), handed to text(),
// json(), arrayBuffer() and bytes() directly, where a Response built over the bytes wraps them in
// a WHATWG stream and reads that stream back (about a fifth of a paid call's Response handling).
// `body` is made on first use (a stream over the same bytes); once it is, every reader goes through
// it, so a body is read at most once either way (a second read rejects, as with fetch).

const utf8 = new TextDecoder();

export class BufferedResponse extends Response {
  #data: Buffer | null;
  #stream: ReadableStream<Uint8Array<ArrayBuffer>> | null | undefined;
  #used = false;

  constructor(data: Buffer | null, init: ResponseInit) {
    super(null, init);
    this.#data = data;
  }

  override get body(): ReadableStream<Uint8Array<ArrayBuffer>> | null {
    if (this.#stream === undefined) this.#stream = this.#data === null ? null : new Response(this.#data as Uint8Array<ArrayBuffer>).body;
    return this.#stream;
  }

  override get bodyUsed(): boolean {
    return this.#used || (this.#stream?.locked ?? false);
  }

  async #bytes(): Promise<Uint8Array<ArrayBuffer>> {
    if (this.#stream) return new Uint8Array(await new Response(this.#stream).arrayBuffer());
    if (this.#used) throw new TypeError('Body is unusable: Body has already been read');
    this.#used = true;
    const d = this.#data;
    return d === null ? new Uint8Array(0) : new Uint8Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength) as ArrayBuffer);
  }

  override async text(): Promise<string> {
    if (!this.#stream && !this.#used && this.#data) {
      this.#used = true;
      return utf8.decode(this.#data);
    }
    return utf8.decode(await this.#bytes());
  }

  override async json(): Promise<any> {
    return JSON.parse(await this.text());
  }

  override async arrayBuffer(): Promise<ArrayBuffer> {
    return (await this.#bytes()).buffer;
  }

  override async bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return this.#bytes();
  }

  override async blob(): Promise<Blob> {
    return new Blob([await this.#bytes()], { type: this.headers.get('content-type') ?? '' });
  }

  override async formData(): Promise<FormData> {
    return new Response(await this.#bytes(), { headers: this.headers }).formData();
  }

  override clone(): Response {
    if (this.bodyUsed) throw new TypeError('Response.clone: Body has already been consumed.');
    const init = { status: this.status, statusText: this.statusText, headers: this.headers };
    let c: Response;
    if (this.#stream) {
      const [mine, theirs] = this.#stream.tee();
      this.#stream = mine;
      c = new Response(theirs, init);
    } else c = new BufferedResponse(this.#data, init);
    Object.defineProperty(c, 'url', { value: this.url });
    if (this.redirected) Object.defineProperty(c, 'redirected', { value: true });
    return c;
  }
}
