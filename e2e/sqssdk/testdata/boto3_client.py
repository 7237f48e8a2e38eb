"""An unchanged-style boto3 app against localcloud's SQS API.

Run by TestBoto3 through `localcloud run`, which exports
AWS_ENDPOINT_URL_SQS, the region and placeholder keys. Older boto3 (Debian's
1.26, Query protocol) does not read AWS_ENDPOINT_URL_SQS, so it is passed as
endpoint_url too. Prints the protocol botocore used and "ok" at the end;
any failed check raises (exit 1).
"""
import os
import sys

import boto3
from botocore.exceptions import ClientError

endpoint = os.environ["AWS_ENDPOINT_URL_SQS"]
c = boto3.client("sqs", endpoint_url=endpoint)
print("protocol", c.meta.service_model.protocol, "boto3", boto3.__version__)


def code_of(fn, **kw):
    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], str(e)
    raise AssertionError("no error from %s" % fn)


q = c.get_queue_url(QueueName="orders")["QueueUrl"]
assert q == endpoint + "/000000000000/orders", q
sent = {"hello from boto3": c.send_message(QueueUrl=q, MessageBody="hello from boto3")["MessageId"]}
r = c.send_message_batch(QueueUrl=q, Entries=[{"Id": "a", "MessageBody": "one"}, {"Id": "b", "MessageBody": "two"}])
assert len(r["Successful"]) == 2 and not r.get("Failed"), r
for e in r["Successful"]:
    sent[{"a": "one", "b": "two"}[e["Id"]]] = e["MessageId"]

got = {}
while len(got) < 4:
    r = c.receive_message(QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=5, VisibilityTimeout=60, AttributeNames=["All"])
    msgs = r.get("Messages", [])
    assert msgs, "nothing received after %d" % len(got)
    for m in msgs:
        assert m["Attributes"]["ApproximateReceiveCount"] == "1", m
        got[m["Body"]] = m
assert set(got) == {"hello from boto3", "one", "two", "from the CLI"}, got
for body, mid in sent.items():  # every receive shows the send's MessageId
    assert got[body]["MessageId"] == mid, (body, mid, got[body])

one = got["one"]
c.change_message_visibility(QueueUrl=q, ReceiptHandle=one["ReceiptHandle"], VisibilityTimeout=0)
r = c.receive_message(QueueUrl=q, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])
again = r["Messages"][0]
assert again["Body"] == "one" and again["MessageId"] == one["MessageId"], again
assert again["Attributes"]["ApproximateReceiveCount"] == "2", again
code, msg = code_of(c.delete_message, QueueUrl=q, ReceiptHandle=one["ReceiptHandle"])
assert code == "InvalidParameterValue" and "expired" in msg, (code, msg)
r = c.delete_message_batch(QueueUrl=q, Entries=[
    {"Id": "stale", "ReceiptHandle": one["ReceiptHandle"]},
    {"Id": "garbage", "ReceiptHandle": "not-a-receipt"},
    {"Id": "two", "ReceiptHandle": got["two"]["ReceiptHandle"]},
])
failed = {f["Id"]: f["Code"] for f in r.get("Failed", [])}
assert [s["Id"] for s in r["Successful"]] == ["two"], r
assert failed == {"stale": "InvalidParameterValue", "garbage": "ReceiptHandleIsInvalid"}, r
for m in (again, got["hello from boto3"], got["from the CLI"]):
    c.delete_message(QueueUrl=q, ReceiptHandle=m["ReceiptHandle"])

a = c.get_queue_attributes(QueueUrl=q, AttributeNames=["All"])["Attributes"]
assert a["ApproximateNumberOfMessages"] == "0" and a["MaximumMessageSize"] == "65536", a
assert '"maxReceiveCount":2' in a["RedrivePolicy"], a

# Message attributes: the digest SQS computes (aws-md5-of-message-attributes'
# example), on the send and on the receive; botocore checks neither itself.
attrs = {"attribName1": {"DataType": "String", "StringValue": "attribValue 1"},
         "bin": {"DataType": "Binary.x", "BinaryValue": b"\x00\x01\xff"}}
sa = c.send_message(QueueUrl=q, MessageBody="with attributes", MessageAttributes={"attribName1": attrs["attribName1"]},
                    MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-a"}})
assert sa["MD5OfMessageAttributes"] == "19e27d4e946b072f3f58da80d94fd778", sa
assert "MD5OfMessageSystemAttributes" in sa, sa
ra = c.receive_message(QueueUrl=q, WaitTimeSeconds=5, MessageAttributeNames=["All"], AttributeNames=["AWSTraceHeader"])["Messages"][0]
assert ra["MessageId"] == sa["MessageId"], ra
assert ra["MD5OfMessageAttributes"] == "19e27d4e946b072f3f58da80d94fd778", ra
assert ra["MessageAttributes"] == {"attribName1": attrs["attribName1"]}, ra
assert ra["Attributes"] == {"AWSTraceHeader": "Root=1-a"}, ra
c.delete_message(QueueUrl=q, ReceiptHandle=ra["ReceiptHandle"])
sb = c.send_message_batch(QueueUrl=q, Entries=[{"Id": "x", "MessageBody": "binary attributes", "MessageAttributes": {"bin": attrs["bin"]}}])
ok = sb["Successful"][0]
rb = c.receive_message(QueueUrl=q, WaitTimeSeconds=5, MessageAttributeNames=["b.*", "bin"])["Messages"][0]
assert rb["MessageAttributes"] == {"bin": attrs["bin"]}, rb
assert rb["MD5OfMessageAttributes"] == ok["MD5OfMessageAttributes"], (rb, ok)
c.delete_message(QueueUrl=q, ReceiptHandle=rb["ReceiptHandle"])

# Dead letters after maxReceiveCount.
c.send_message(QueueUrl=q, MessageBody="poison")
for _ in range(2):
    m = c.receive_message(QueueUrl=q, WaitTimeSeconds=5)["Messages"][0]
    c.change_message_visibility(QueueUrl=q, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
assert not c.receive_message(QueueUrl=q, WaitTimeSeconds=1).get("Messages"), "poison delivered a third time"
dlq = c.get_queue_url(QueueName="orders-dlq")["QueueUrl"]
m = c.receive_message(QueueUrl=dlq, WaitTimeSeconds=5)["Messages"][0]
assert m["Body"] == "poison", m
c.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])

c.send_message(QueueUrl=q, MessageBody="to purge")
c.purge_queue(QueueUrl=q)
a = c.get_queue_attributes(QueueUrl=q, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
assert a["ApproximateNumberOfMessages"] == "0", a

try:
    c.get_queue_url(QueueName="nope")
    raise AssertionError("no error for a missing queue")
except c.exceptions.QueueDoesNotExist:
    pass
code, msg = code_of(c.send_message, QueueUrl=q, MessageBody="x" * 65537)
assert code == "InvalidParameterValue" and "65537" in msg, (code, msg)
code, msg = code_of(c.create_queue, QueueName="jobs.fifo")
assert "UnsupportedOperation" in code, (code, msg)
assert c.create_queue(QueueName="orders")["QueueUrl"] == q
urls = c.list_queues(QueueNamePrefix="orders")["QueueUrls"]
assert sorted(urls) == [q, dlq], urls
c.send_message(QueueUrl=q, MessageBody="left for the CLI")
print("ok")
sys.stdout.flush()
