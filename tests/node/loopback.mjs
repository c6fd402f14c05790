// loopback.mjs — preload (`node --import ./loopback.mjs ...`) that keeps a server on the
// loopback interface: server-everything's Streamable HTTP mode calls app.listen(PORT), which
// binds every interface; with this a listen() given only a port binds 127.0.0.1.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
    const first = args[0];
    const portOnly = (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) &&
        (args.length === 1 || typeof args[1] === "function");
    if (portOnly) {
        args.splice(1, 0, "127.0.0.1");
    } else if (first && typeof first === "object" && first.port !== undefined && first.host === undefined &&
               first.path === undefined) {
        args[0] = { ...first, host: "127.0.0.1" };
    }
    return listen.apply(this, args);
};
