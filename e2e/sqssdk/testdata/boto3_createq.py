"""Create, tag, change and delete a queue with boto3 through `localcloud run`.

Run by TestBoto3CreatedQueue. Prints the protocol botocore used and "ok" at
the end; any failed check raises (exit 1).
"""
import json
import os

import boto3
from botocore.exceptions import ClientError

endpoint = os.environ["AWS_ENDPOINT_URL_SQS"]
c = boto3.client("sqs", endpoint_url=endpoint)
print("protocol", c.meta.service_model.protocol, "boto3", boto3.__version__)

dlq_arn = c.get_queue_attributes(QueueUrl=c.get_queue_url(QueueName="orders-dlq")["QueueUrl"], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
q = c.create_queue(QueueName="py-made", Attributes={"VisibilityTimeout": "25"}, tags={"lang": "python"})["QueueUrl"]
assert q == endpoint + "/000000000000/py-made", q
assert c.create_queue(QueueName="py-made", Attributes={"VisibilityTimeout": "25"})["QueueUrl"] == q
try:
    c.create_queue(QueueName="py-made", Attributes={"VisibilityTimeout": "26"})
    raise AssertionError("no error for other attributes")
except ClientError as e:
    assert e.response["Error"]["Code"] in ("QueueAlreadyExists", "QueueNameExists"), e.response
c.set_queue_attributes(QueueUrl=q, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "4"})})
a = c.get_queue_attributes(QueueUrl=q, AttributeNames=["All"])["Attributes"]
assert a["VisibilityTimeout"] == "25" and json.loads(a["RedrivePolicy"])["maxReceiveCount"] in (4, "4"), a
c.tag_queue(QueueUrl=q, Tags={"team": "x"})
c.untag_queue(QueueUrl=q, TagKeys=["lang"])
assert c.list_queue_tags(QueueUrl=q)["Tags"] == {"team": "x"}, c.list_queue_tags(QueueUrl=q)
c.send_message(QueueUrl=q, MessageBody="kept for the CLI")
assert q in c.list_queues(QueueNamePrefix="py-")["QueueUrls"]
c.create_queue(QueueName="py-gone")
c.delete_queue(QueueUrl=endpoint + "/000000000000/py-gone")
try:
    c.get_queue_url(QueueName="py-gone")
    raise AssertionError("py-gone still there")
except ClientError as e:
    assert e.response["Error"]["Code"] in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"), e.response
print("ok")
