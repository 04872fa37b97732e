package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, message string) *apiError {
	return &apiError{status: status, code: code, message: message}
}

func retryable(status int, code, message string, after time.Duration) *apiError {
	return &apiError{status: status, code: code, message: message, retryAfter: after}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		secs := int((e.retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(1, secs)))
	}
	var b errorBody
	b.Error.Code, b.Error.Message = e.code, e.message
	writeJSON(w, e.status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSONCached(w, status, v)
}

// writeJSONCached writes v with the Cache-Control the caller set (no-store
// when it set none).
func writeJSONCached(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
