package sqssdk

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// qclient is a minimal SQS client of the Query protocol (form requests,
// XML answers): the one client code of the benchmark, since goaws speaks
// only that protocol. Unsigned: neither server checks signatures here.
type qclient struct {
	hc       *http.Client
	endpoint string
}

func newQClient(endpoint string) *qclient {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}
	return &qclient{hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, endpoint: endpoint}
}

func (c *qclient) call(form url.Values) ([]byte, error) {
	form.Set("Version", "2012-11-05")
	resp, err := c.hc.Post(c.endpoint+"/", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", form.Get("Action"), resp.StatusCode, body)
	}
	return body, nil
}

func (c *qclient) queueURL(name string) (string, error) {
	body, err := c.call(url.Values{"Action": {"GetQueueUrl"}, "QueueName": {name}})
	if err != nil {
		return "", err
	}
	var r struct {
		URL string `xml:"GetQueueUrlResult>QueueUrl"`
	}
	if err := xml.Unmarshal(body, &r); err != nil || r.URL == "" {
		return "", fmt.Errorf("GetQueueUrl: %v: %s", err, body)
	}
	return r.URL, nil
}

func (c *qclient) send(q, body string) error {
	_, err := c.call(url.Values{"Action": {"SendMessage"}, "QueueUrl": {q}, "MessageBody": {body}})
	return err
}

func (c *qclient) sendBatch(q string, bodies []string) error {
	f := url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {q}}
	for i, b := range bodies {
		p := "SendMessageBatchRequestEntry." + strconv.Itoa(i+1) + "."
		f.Set(p+"Id", "m"+strconv.Itoa(i))
		f.Set(p+"MessageBody", b)
	}
	body, err := c.call(f)
	if err == nil && strings.Contains(string(body), "<BatchResultErrorEntry>") {
		err = fmt.Errorf("SendMessageBatch: failed entries: %s", body)
	}
	return err
}

type qmessage struct {
	Body          string
	ReceiptHandle string
}

func (c *qclient) receive(q string, max, wait int) ([]qmessage, error) {
	body, err := c.call(url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {q}, "MaxNumberOfMessages": {strconv.Itoa(max)},
		"WaitTimeSeconds": {strconv.Itoa(wait)}, "VisibilityTimeout": {"60"}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Messages []qmessage `xml:"ReceiveMessageResult>Message"`
	}
	if err := xml.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("ReceiveMessage: %v: %s", err, body)
	}
	return r.Messages, nil
}

func (c *qclient) deleteBatch(q string, ms []qmessage) error {
	f := url.Values{"Action": {"DeleteMessageBatch"}, "QueueUrl": {q}}
	for i, m := range ms {
		p := "DeleteMessageBatchRequestEntry." + strconv.Itoa(i+1) + "."
		f.Set(p+"Id", "d"+strconv.Itoa(i))
		f.Set(p+"ReceiptHandle", m.ReceiptHandle)
	}
	body, err := c.call(f)
	if err == nil && strings.Contains(string(body), "<BatchResultErrorEntry>") {
		err = fmt.Errorf("DeleteMessageBatch: failed entries: %s", body)
	}
	return err
}
