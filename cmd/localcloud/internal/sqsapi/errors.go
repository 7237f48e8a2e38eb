package sqsapi

import (
	"fmt"
	"net/http"
)

// code is an SQS error: its name in the JSON protocol (__type, the
// exception an SDK raises), its code in the Query protocol (also sent to
// JSON clients in x-amzn-query-error, which SDKs of the JSON protocol read
// for SQS), its HTTP status and whether the server is at fault.
type code struct {
	json, query string
	status      int
	server      bool
}

var (
	codeQueueDoesNotExist        = code{"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400, false}
	codeQueueNameExists          = code{"QueueNameExists", "QueueAlreadyExists", 400, false}
	codeInvalidParameterValue    = code{"InvalidParameterValue", "InvalidParameterValue", 400, false}
	codeMissingParameter         = code{"MissingParameter", "MissingParameter", 400, false}
	codeInvalidAction            = code{"InvalidAction", "InvalidAction", 400, false}
	codeReceiptHandleIsInvalid   = code{"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404, false}
	codeMessageNotInflight       = code{"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400, false}
	codeTooManyEntries           = code{"TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400, false}
	codeBatchEntryIdsNotDistinct = code{"BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400, false}
	codeEmptyBatchRequest        = code{"EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400, false}
	codeInvalidBatchEntryID      = code{"InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400, false}
	codeBatchRequestTooLong      = code{"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400, false}
	codeInvalidMessageContents   = code{"InvalidMessageContents", "InvalidMessageContents", 400, false}
	codeInvalidAttributeName     = code{"InvalidAttributeName", "InvalidAttributeName", 400, false}
	codeInvalidAttributeValue    = code{"InvalidAttributeValue", "InvalidAttributeValue", 400, false}
	codeUnsupportedOperation     = code{"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400, false}
	codeResourceNotFound         = code{"ResourceNotFoundException", "ResourceNotFoundException", 404, false}
	codeSerialization            = code{"SerializationException", "SerializationException", 400, false}
	codeInvalidClientTokenID     = code{"InvalidClientTokenId", "InvalidClientTokenId", 403, false}
	codeSignatureDoesNotMatch    = code{"SignatureDoesNotMatch", "SignatureDoesNotMatch", 403, false}
	codeMissingAuthToken         = code{"MissingAuthenticationToken", "MissingAuthenticationToken", 403, false}
	codeRequestExpired           = code{"RequestExpired", "RequestExpired", 400, false}
	codeInternalFailure          = code{"InternalFailure", "InternalFailure", http.StatusInternalServerError, true}
	codeServiceUnavailable       = code{"ServiceUnavailable", "ServiceUnavailable", http.StatusServiceUnavailable, true}
)

// apiError is an error answered to a client.
type apiError struct {
	code code
	msg  string
}

func (e *apiError) Error() string { return e.code.query + ": " + e.msg }

func errf(c code, format string, args ...any) *apiError {
	return &apiError{code: c, msg: fmt.Sprintf(format, args...)}
}
