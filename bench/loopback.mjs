// bench/loopback.mjs — loaded with `node --import` into server-everything and supergateway, which
// listen on a port without naming a host (all interfaces): such listens bind 127.0.0.1 instead,
// so the benchmark's servers are reachable from this machine only.
import net from 'node:net';

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
    const first = args[0];
    if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
        if (typeof args[1] !== 'string') {
            args.splice(1, 0, '127.0.0.1');
        }
    } else if (first && typeof first === 'object' && first.port !== undefined && !first.host && !first.path) {
        args[0] = { ...first, host: '127.0.0.1' };
    }
    return listen.apply(this, args);
};
