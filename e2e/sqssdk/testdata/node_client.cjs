// An app of the AWS SDK for JavaScript v3 (JSON protocol) against
// localcloud's SQS API, run by TestNodeSDK under `localcloud run`: the SDK
// reads AWS_ENDPOINT_URL_SQS, the region and the keys from the
// environment run exports. The SDK checks MD5OfMessageBody of sends and
// receives. Prints "ok" at the end; a failed check exits 1.
const {
  SQSClient, GetQueueUrlCommand, SendMessageCommand, SendMessageBatchCommand, ReceiveMessageCommand,
  DeleteMessageCommand, DeleteMessageBatchCommand, ChangeMessageVisibilityCommand, GetQueueAttributesCommand,
  PurgeQueueCommand, QueueDoesNotExist,
} = require("@aws-sdk/client-sqs");
const assert = require("node:assert/strict");

(async () => {
  const c = new SQSClient({});
  const endpoint = process.env.AWS_ENDPOINT_URL_SQS;
  const q = (await c.send(new GetQueueUrlCommand({ QueueName: "orders" }))).QueueUrl;
  assert.equal(q, endpoint + "/000000000000/orders");
  await c.send(new SendMessageCommand({ QueueUrl: q, MessageBody: "hello from node" }));
  const b = await c.send(new SendMessageBatchCommand({ QueueUrl: q, Entries: [{ Id: "a", MessageBody: "one" }, { Id: "b", MessageBody: "two" }] }));
  assert.equal(b.Successful.length, 2);
  const got = {};
  while (Object.keys(got).length < 4) {
    const r = await c.send(new ReceiveMessageCommand({ QueueUrl: q, MaxNumberOfMessages: 10, WaitTimeSeconds: 5, VisibilityTimeout: 60,
      MessageSystemAttributeNames: ["All"] }));
    assert.ok(r.Messages && r.Messages.length > 0, "nothing received");
    for (const m of r.Messages) {
      assert.equal(m.Attributes.ApproximateReceiveCount, "1");
      got[m.Body] = m;
    }
  }
  assert.deepEqual(Object.keys(got).sort(), ["from the CLI", "hello from node", "one", "two"]);
  const one = got["one"];
  await c.send(new ChangeMessageVisibilityCommand({ QueueUrl: q, ReceiptHandle: one.ReceiptHandle, VisibilityTimeout: 0 }));
  const again = (await c.send(new ReceiveMessageCommand({ QueueUrl: q, WaitTimeSeconds: 5 }))).Messages[0];
  assert.equal(again.MessageId, one.MessageId);
  await assert.rejects(c.send(new DeleteMessageCommand({ QueueUrl: q, ReceiptHandle: one.ReceiptHandle })),
    (e) => e.name === "InvalidParameterValue" && /expired/.test(e.message));
  const d = await c.send(new DeleteMessageBatchCommand({ QueueUrl: q, Entries: [
    { Id: "stale", ReceiptHandle: one.ReceiptHandle }, { Id: "garbage", ReceiptHandle: "not-a-receipt" },
    { Id: "two", ReceiptHandle: got["two"].ReceiptHandle }] }));
  assert.deepEqual(d.Successful.map((s) => s.Id), ["two"]);
  assert.deepEqual(Object.fromEntries(d.Failed.map((f) => [f.Id, f.Code])), { stale: "InvalidParameterValue", garbage: "ReceiptHandleIsInvalid" });
  for (const m of [again, got["hello from node"], got["from the CLI"]]) {
    await c.send(new DeleteMessageCommand({ QueueUrl: q, ReceiptHandle: m.ReceiptHandle }));
  }
  const a = (await c.send(new GetQueueAttributesCommand({ QueueUrl: q, AttributeNames: ["All"] }))).Attributes;
  assert.equal(a.ApproximateNumberOfMessages, "0");
  assert.equal(a.MaximumMessageSize, "65536");
  await assert.rejects(c.send(new GetQueueUrlCommand({ QueueName: "nope" })), (e) => e instanceof QueueDoesNotExist);
  // Message attributes: the digest SQS computes (aws-md5-of-message-attributes'
  // example), on the send and on the receive.
  const sa = await c.send(new SendMessageCommand({ QueueUrl: q, MessageBody: "with attributes",
    MessageAttributes: { attribName1: { DataType: "String", StringValue: "attribValue 1" } } }));
  assert.equal(sa.MD5OfMessageAttributes, "19e27d4e946b072f3f58da80d94fd778");
  const ra = (await c.send(new ReceiveMessageCommand({ QueueUrl: q, WaitTimeSeconds: 5, MessageAttributeNames: ["All"] }))).Messages[0];
  assert.equal(ra.MessageId, sa.MessageId);
  assert.equal(ra.MD5OfMessageAttributes, "19e27d4e946b072f3f58da80d94fd778");
  assert.deepEqual(ra.MessageAttributes, { attribName1: { DataType: "String", StringValue: "attribValue 1" } });
  await c.send(new DeleteMessageCommand({ QueueUrl: q, ReceiptHandle: ra.ReceiptHandle }));
  await c.send(new SendMessageCommand({ QueueUrl: q, MessageBody: "to purge" }));
  await c.send(new PurgeQueueCommand({ QueueUrl: q }));
  await c.send(new SendMessageCommand({ QueueUrl: q, MessageBody: "left for the CLI" }));
  console.log("ok");
})().catch((e) => { console.error(e); process.exit(1); });
