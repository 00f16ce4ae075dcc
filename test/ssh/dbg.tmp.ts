import { run } from '../helpers/run.js';
import { addServer, sshArgs, startSshDaemon } from './helpers/env.js';
const d = await startSshDaemon();
try {
const A = await addServer(d, 'dbg-alpha', {}, true);
const ssh = (c: string) => run('ssh', [...sshArgs(d.port, A.keyFile, ['-o','LogLevel=ERROR']), c]);
console.log(await ssh('ps -o pid,ppid,pgid,sid,args -e; echo; ps -o pid,pgid,sid,args -p $$; sleep 0.1 | ps -o pid,pgid,sid,args'));
console.log(await ssh('(nohup python3 -m http.server 80 --directory /root >/dev/null 2>&1 &); sleep 1; ps -eo pid,args | grep -v ps'));
console.log(await ssh('sleep 1; ps -eo pid,args; python3 -c "import urllib.request;print(urllib.request.urlopen(\'http://127.0.0.1/\').status)"'));
} finally { await d.stop(); }
