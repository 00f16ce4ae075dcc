// The run.sh app of the doze tests (python standard library, as the image has no web server):
//   - HTTP/1.1 on :80 with keep-alive, answering `pid= ticks= wall= mono= conn= path=`: ticks is
//     a 100 ms timer thread's count, wall and mono the app's clocks, conn the number of the TCP
//     connection it came on (accepted connections are numbered);
//   - WebSocket echo on :80 (small text frames); the message `push` makes the app send `tick`
//     every 300 ms on that socket from then on;
//   - a TCP echo service on :7000 (line by line).

export const DOZE_APP_PY = String.raw`
import base64, hashlib, os, socket, threading, time
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
ticks = 0
conns = 0
def ticker():
    global ticks
    while True:
        time.sleep(0.1)
        ticks += 1
threading.Thread(target=ticker, daemon=True).start()
def recv_until(c, buf, n):
    while len(buf) < n:
        d = c.recv(65536)
        if not d: return None
        buf += d
    return buf
def frame(text):
    b = text.encode()
    return bytes([0x81, len(b)]) + b
def pusher(c):
    try:
        while True:
            time.sleep(0.3)
            c.sendall(frame("tick"))
    except OSError:
        pass
def ws(c, buf):
    while True:
        buf = recv_until(c, buf, 2)
        if buf is None: return
        op, n = buf[0] & 15, buf[1] & 127
        buf = recv_until(c, buf, 6 + n)
        if buf is None or op == 8: return
        mask, data = buf[2:6], buf[6:6 + n]
        buf = buf[6 + n:]
        text = bytes(b ^ mask[i % 4] for i, b in enumerate(data)).decode()
        if text == "push":
            threading.Thread(target=pusher, args=(c,), daemon=True).start()
        c.sendall(frame(text))
def handle(c, n):
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d: return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin1").split("\r\n")
            h = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
            if h.get("upgrade", "").lower() == "websocket":
                acc = base64.b64encode(hashlib.sha1(h["sec-websocket-key"].encode() + GUID).digest()).decode()
                c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
                return ws(c, buf)
            body = ("pid=%d ticks=%d wall=%.3f mono=%.3f conn=%d path=%s" % (os.getpid(), ticks, time.time(), time.monotonic(), n, lines[0].split(" ")[1])).encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        c.close()
def echo(c):
    try:
        while True:
            d = c.recv(65536)
            if not d: return
            c.sendall(d)
    finally:
        c.close()
def serve(port, target, numbered):
    global conns
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(128)
    while True:
        c, _ = s.accept()
        conns += 1
        threading.Thread(target=target, args=(c, conns) if numbered else (c,), daemon=True).start()
threading.Thread(target=serve, args=(7000, echo, False), daemon=True).start()
serve(80, handle, True)
`;

export const DOZE_RUN_SH = '#!/bin/bash\necho "run.sh starting"\nexec python3 /root/app.py\n';

/** Fields of an answer of the app. */
export function fields(text: string): { pid: number; ticks: number; wall: number; mono: number; conn: number; path: string } {
  const m = /^pid=(\d+) ticks=(\d+) wall=([\d.]+) mono=([\d.]+) conn=(\d+) path=(\S+)$/.exec(text);
  if (!m) throw new Error(`not an answer of the app: ${JSON.stringify(text.slice(0, 200))}`);
  return { pid: +m[1], ticks: +m[2], wall: +m[3], mono: +m[4], conn: +m[5], path: m[6] };
}
