// A first message from Node: NEW, SEND, SUB, the pushed MSG, ACK (README, "A first message").
//   node hello.mjs 'smp://<keyHash>@127.0.0.1:5224'     (Node 20: node --experimental-websocket)
import { connect, parseRouterAddress, wsUrl, utf8, fromUtf8 } from "smp-router-web";

const router = parseRouterAddress(process.argv[2]);
const client = await connect(wsUrl(router), router.keyHash);
const queue = await client.createQueue({ sndSecure: false }); // NEW
await client.send(queue.senderId, utf8("hello"));              // SEND
await client.subscribe(queue);                                 // SUB
const event = await client.nextEvent();                        // the pushed MSG
console.log(fromUtf8(event.body));
await client.ack(queue, event.msgId);                          // ACK
client.close();
