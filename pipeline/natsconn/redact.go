package natsconn

import "regexp"

// The user information of a URL: scheme://user:password@ or scheme://token@. A NATS URL
// carries credentials this way, and a comma-separated list of them several times.
var (
	userPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^:@/,\s]*):([^@/,\s]*)@`)
	token        = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^:@/,\s]+)@`)
)

// Redacted replaces every password in the URLs in s with xxxxx, as net/url's Redacted
// does (nats://tallyd:secret@a:4222 becomes nats://tallyd:xxxxx@a:4222), and every
// token (nats://secret@a:4222, a user without a password) entirely. s may be a URL, a
// comma-separated list of them, or any text that quotes them, such as an error
// message.
func Redacted(s string) string {
	s = userPassword.ReplaceAllString(s, "${1}${2}:xxxxx@")
	return token.ReplaceAllString(s, "${1}xxxxx@")
}
