package cluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// putObject stores what r reads as object meta.Name of the object store bucket, in the
// format of nats.go's ObjectStore.Put (chunks on $O.<bucket>.C.<nuid>, then the info on
// $O.<bucket>.M.<name>, rolled up), which ObjectStore.Get reads and checks by digest.
//
// It is ObjectStore.Put with one difference: each chunk published has a buffer of its
// own. nats.go's Put reads every chunk into one buffer and publishes it asynchronously;
// a publish answered "no responders" (a stream leader lost with its server) is sent
// again a moment later from that buffer, which the next chunk's read is overwriting by
// then — a data race the detector found, and a backup stored with another chunk's bytes
// in place of one of its own, refused by its digest when restored. And a chunk answered
// "no responders" is not sent again: nats.go sends it after the chunks behind it. Puts
// here are of names never used before (each backup has its own), so no earlier chunks
// are purged.
func putObject(ctx context.Context, js jetstream.JetStream, bucket string, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	const chunkSize = 128 << 10 // nats.go's default
	var (
		mu   sync.Mutex
		perr error
	)
	pub, err := jetstream.New(js.Conn(),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			mu.Lock()
			perr = cmp.Or(perr, err)
			mu.Unlock()
		}),
		jetstream.WithPublishAsyncMaxPending(64)) // 8 MiB of chunks in flight at most
	if err != nil {
		return nil, err
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return perr
	}
	id := nuid.Next()
	chunkSubj := fmt.Sprintf("$O.%s.C.%s", bucket, id)
	purge := func() {
		if st, err := js.Stream(context.WithoutCancel(ctx), "OBJ_"+bucket); err == nil {
			_ = st.Purge(context.WithoutCancel(ctx), jetstream.WithPurgeSubject(chunkSubj))
		}
	}
	h := sha256.New()
	var size uint64
	var chunks uint32
	for {
		if err := cmp.Or(ctx.Err(), failed()); err != nil {
			purge()
			return nil, err
		}
		buf := make([]byte, chunkSize) // its own: a retried publish sends it again
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			purge()
			return nil, rerr
		}
		if n > 0 {
			h.Write(buf[:n])
			// Not retried: nats.go sends a chunk answered "no responders" again 250 ms
			// later, after the chunks behind it, and the object stored out of order
			// failed its digest when read (TestPutObjectNotReordered). The put fails, and
			// the next backup stores it whole.
			if _, err := pub.PublishMsgAsync(&nats.Msg{Subject: chunkSubj, Data: buf[:n]}, jetstream.WithRetryAttempts(0)); err != nil {
				purge()
				return nil, err
			}
			size += uint64(n)
			chunks++
		}
		if rerr != nil { // the end
			break
		}
	}
	// Every chunk stored before the info that names them: an info never points at
	// chunks that are not there.
	select {
	case <-pub.PublishAsyncComplete():
	case <-ctx.Done():
		purge()
		return nil, ctx.Err()
	}
	if err := failed(); err != nil {
		purge()
		return nil, err
	}
	meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}
	info := &jetstream.ObjectInfo{ObjectMeta: meta, Bucket: bucket, NUID: id, Size: size, Chunks: chunks,
		Digest: jetstream.GetObjectDigestValue(h)}
	data, err := json.Marshal(info)
	if err != nil {
		purge()
		return nil, err
	}
	mm := nats.NewMsg(fmt.Sprintf("$O.%s.M.%s", bucket, base64.URLEncoding.EncodeToString([]byte(meta.Name))))
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	mm.Data = data
	if _, err := pub.PublishMsg(ctx, mm); err != nil {
		purge()
		return nil, err
	}
	return info, nil
}
