package sqsemu

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Region is the region of AWSConfig.
const Region = "us-east-1"

// AWSConfig returns an aws.Config with the static fake credentials and the
// region the emulator accepts. It reads nothing from the environment.
func AWSConfig() aws.Config {
	return aws.Config{
		Region: Region,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "sqsemu", SecretAccessKey: "sqsemu", Source: "sqsemu"}, nil
		}),
	}
}

// ClientOptions returns the SQS client options that point a client at the
// emulator: its endpoint, and Transport as the HTTP client. goaws computes
// no attribute checksum the SDK accepts, so checksum validation is off.
func (s *Server) ClientOptions() []func(*awssqs.Options) { return ClientOptions(s.url) }

// ClientOptions is Server.ClientOptions for an emulator at endpoint (for a
// process other than the emulator's own, such as a test's child process).
func ClientOptions(endpoint string) []func(*awssqs.Options) {
	return []func(*awssqs.Options){func(o *awssqs.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.HTTPClient = &http.Client{Transport: &Transport{Base: loopback}}
		o.DisableMessageChecksumValidation = true
		o.RetryMaxAttempts = 1
	}}
}

// loopback carries the translated requests of ClientOptions' clients: many
// clients share one emulator, more idle connections than
// http.DefaultTransport keeps per host.
var loopback = &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}

// Transport is an http.RoundTripper that turns the SDK v2's JSON-protocol
// SQS requests into goaws's query-protocol requests and their XML replies
// back into JSON. Base carries the translated requests (default
// http.DefaultTransport).
type Transport struct {
	Base http.RoundTripper
}

// RoundTrip translates one request.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	action, ok := strings.CutPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if !ok {
		return nil, fmt.Errorf("sqsemu: not an SQS JSON request (X-Amz-Target %q)", req.Header.Get("X-Amz-Target"))
	}
	var in map[string]any
	if req.Body != nil {
		dec := json.NewDecoder(req.Body)
		dec.UseNumber()
		err := dec.Decode(&in)
		_ = req.Body.Close()
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("sqsemu: decode %s request: %w", action, err)
		}
	}
	if _, ok := replies[action]; !ok {
		return jsonError(req, http.StatusBadRequest, "UnsupportedOperation", "sqsemu: "+action+" is not emulated"), nil
	}
	form, err := toForm(action, in)
	if err != nil {
		return nil, err
	}
	u := *req.URL
	u.Path, u.RawQuery = "/", ""
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	out.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return fromXMLError(req, resp.StatusCode, body), nil
	}
	reply, err := replies[action](body)
	if err != nil {
		return nil, fmt.Errorf("sqsemu: %s reply: %w", action, err)
	}
	return jsonResponse(req, http.StatusOK, reply), nil
}

// toForm flattens a JSON request into query-protocol form values.
func toForm(action string, in map[string]any) (url.Values, error) {
	f := url.Values{"Action": {action}, "Version": {"2012-11-05"}}
	for k, v := range in {
		switch k {
		case "Attributes": // CreateQueue, SetQueueAttributes
			m, _ := v.(map[string]any)
			for i, name := range sortedKeys(m) {
				f.Set(fmt.Sprintf("Attribute.%d.Name", i+1), name)
				f.Set(fmt.Sprintf("Attribute.%d.Value", i+1), scalar(m[name]))
			}
		case "MessageAttributes": // SendMessage
			m, _ := v.(map[string]any)
			for i, name := range sortedKeys(m) {
				p := fmt.Sprintf("MessageAttribute.%d.", i+1)
				f.Set(p+"Name", name)
				attr, _ := m[name].(map[string]any)
				for _, field := range []string{"DataType", "StringValue", "BinaryValue"} {
					if fv, ok := attr[field]; ok {
						f.Set(p+"Value."+field, scalar(fv))
					}
				}
			}
		case "AttributeNames", "MessageSystemAttributeNames":
			list(f, "AttributeName", v)
		case "MessageAttributeNames":
			list(f, "MessageAttributeName", v)
		case "tags":
		default:
			s := scalar(v)
			if s == "" && v != nil {
				return nil, fmt.Errorf("sqsemu: %s: field %s of type %T is not translated", action, k, v)
			}
			f.Set(k, s)
		}
	}
	return f, nil
}

func list(f url.Values, prefix string, v any) {
	items, _ := v.([]any)
	for i, item := range items {
		f.Set(fmt.Sprintf("%s.%d", prefix, i+1), scalar(item))
	}
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	default:
		return ""
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// replies turns a goaws XML reply into the JSON reply of the action.
var replies = map[string]func([]byte) (any, error){
	"CreateQueue": func(b []byte) (any, error) {
		var r app.CreateQueueResponse
		err := xml.Unmarshal(b, &r)
		return map[string]any{"QueueUrl": r.Result.QueueUrl}, err
	},
	"GetQueueUrl": func(b []byte) (any, error) {
		var r app.GetQueueUrlResponse
		err := xml.Unmarshal(b, &r)
		return map[string]any{"QueueUrl": r.Result.QueueUrl}, err
	},
	"ListQueues": func(b []byte) (any, error) {
		var r app.ListQueuesResponse
		err := xml.Unmarshal(b, &r)
		return map[string]any{"QueueUrls": r.Result.QueueUrl}, err
	},
	"GetQueueAttributes": func(b []byte) (any, error) {
		var r app.GetQueueAttributesResponse
		err := xml.Unmarshal(b, &r)
		attrs := map[string]string{}
		for _, a := range r.Result.Attrs {
			attrs[a.Name] = a.Value
		}
		return map[string]any{"Attributes": attrs}, err
	},
	"SendMessage": func(b []byte) (any, error) {
		var r app.SendMessageResponse
		err := xml.Unmarshal(b, &r)
		out := map[string]any{"MessageId": r.Result.MessageId, "MD5OfMessageBody": r.Result.MD5OfMessageBody}
		if r.Result.SequenceNumber != "" {
			out["SequenceNumber"] = r.Result.SequenceNumber
		}
		return out, err
	},
	"ReceiveMessage":          receiveReply,
	"DeleteMessage":           empty,
	"ChangeMessageVisibility": empty,
	"DeleteQueue":             empty,
	"PurgeQueue":              empty,
	"SetQueueAttributes":      empty,
}

func empty([]byte) (any, error) { return map[string]any{}, nil }

type jsonAttrValue struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue string `json:"BinaryValue,omitempty"` // base64, as goaws keeps it
}

type jsonMessage struct {
	MessageID         string                   `json:"MessageId"`
	ReceiptHandle     string                   `json:"ReceiptHandle"`
	MD5OfBody         string                   `json:"MD5OfBody"`
	Body              string                   `json:"Body"`
	Attributes        map[string]string        `json:"Attributes,omitempty"`
	MessageAttributes map[string]jsonAttrValue `json:"MessageAttributes,omitempty"`
}

func receiveReply(b []byte) (any, error) {
	var r app.ReceiveMessageResponse
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	msgs := make([]jsonMessage, 0, len(r.Result.Message))
	for _, m := range r.Result.Message {
		jm := jsonMessage{MessageID: m.MessageId, ReceiptHandle: m.ReceiptHandle, MD5OfBody: m.MD5OfBody, Body: string(m.Body)}
		if len(m.Attributes) > 0 {
			jm.Attributes = map[string]string{}
			for _, a := range m.Attributes {
				jm.Attributes[a.Name] = a.Value
			}
		}
		if len(m.MessageAttributes) > 0 {
			jm.MessageAttributes = map[string]jsonAttrValue{}
			for _, a := range m.MessageAttributes {
				if a.Value == nil {
					continue
				}
				jm.MessageAttributes[a.Name] = jsonAttrValue{DataType: a.Value.DataType,
					StringValue: a.Value.StringValue, BinaryValue: a.Value.BinaryValue}
			}
		}
		msgs = append(msgs, jm)
	}
	return map[string]any{"Messages": msgs}, nil
}

// errorTypes maps goaws's error codes to the JSON protocol's error types.
var errorTypes = map[string]string{
	"AWS.SimpleQueueService.NonExistentQueue":   "QueueDoesNotExist",
	"AWS.SimpleQueueService.MessageNotInFlight": "MessageNotInflight",
	"InvalidMessageContents":                    "InvalidMessageContents",
}

func fromXMLError(req *http.Request, status int, body []byte) *http.Response {
	var e app.ErrorResponse
	if err := xml.Unmarshal(body, &e); err != nil {
		return jsonError(req, status, "InternalError", strings.TrimSpace(string(body)))
	}
	typ, ok := errorTypes[e.Result.Code]
	switch {
	case ok:
	case status == http.StatusNotFound:
		// goaws's "does not contain the message" (a receipt handle that is
		// no longer current).
		typ = "ReceiptHandleIsInvalid"
	default:
		typ = e.Result.Code[strings.LastIndex(e.Result.Code, ".")+1:]
	}
	return jsonError(req, status, typ, e.Result.Message)
}

func jsonError(req *http.Request, status int, typ, msg string) *http.Response {
	resp := jsonResponse(req, status, map[string]string{"__type": "com.amazonaws.sqs#" + typ, "message": msg})
	resp.Header.Set("X-Amzn-Query-Error", typ+";Sender")
	return resp
}

func jsonResponse(req *http.Request, status int, v any) *http.Response {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       req,
	}
}
