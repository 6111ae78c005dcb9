//! The providers beyond Anthropic and OpenAI, streamed through the same
//! tracker: Gemini's `alt=sse` chunks (usage in the last), OpenRouter's
//! mid-stream error chunk, DeepSeek's `: keep-alive` comments while queued.

use ratewise_core::{Cause, Provider};
use ratewise_streaming::{InterruptReason, StreamOutcome, StreamTracker, TrackerConfig};

fn run(provider: Provider, bytes: &[u8]) -> StreamOutcome {
    let mut t = StreamTracker::new(provider, TrackerConfig::default());
    // Cut at every 7th byte: chunking never changes the outcome.
    for piece in bytes.chunks(7) {
        t.observe(piece).unwrap();
    }
    t.outcome(true)
}

#[test]
fn a_gemini_stream_completes_with_the_last_chunks_usage() {
    let body = concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"totalTokenCount\":12}}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" world\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":3,\"totalTokenCount\":15}}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":4,\"totalTokenCount\":16}}\r\n\r\n",
    );
    match run(Provider::Gemini, body.as_bytes()) {
        StreamOutcome::Completed { usage: Some(u) } => {
            assert_eq!((u.input_tokens, u.output_tokens), (12, 4));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_gemini_stream_cut_before_its_finish_is_interrupted_with_the_usage_so_far() {
    let body = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":1}}\r\n\r\n";
    match run(Provider::Gemini, body.as_bytes()) {
        StreamOutcome::Interrupted {
            reason: InterruptReason::EndedEarly,
            content_delivered: true,
            usage_so_far: Some(u),
            ..
        } => assert_eq!(u.input_tokens, 12),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_openrouter_error_chunk_after_content_is_a_mid_stream_failure() {
    let body = concat!(
        ": OPENROUTER PROCESSING\n\n",
        "data: {\"id\":\"gen-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"id\":\"gen-1\",\"object\":\"chat.completion.chunk\",\"error\":{\"code\":\"server_error\",\"message\":\"Provider disconnected unexpectedly\"},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n",
    );
    match run(Provider::Openrouter, body.as_bytes()) {
        StreamOutcome::MidStream {
            cause,
            content_delivered: true,
            error,
            ..
        } => {
            assert_eq!(cause, Cause::ServerError);
            assert_eq!(error.code.as_deref(), Some("server_error"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn deepseek_keep_alive_comments_while_queued_change_nothing() {
    let body = concat!(
        ": keep-alive\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n",
        "data: {\"id\":\"1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\n",
        "data: [DONE]\n\n",
    );
    match run(Provider::Deepseek, body.as_bytes()) {
        StreamOutcome::Completed { usage: Some(u) } => {
            assert_eq!((u.input_tokens, u.output_tokens), (7, 1));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_azure_content_filter_chunk_is_a_request_to_change_not_a_retry() {
    let body = concat!(
        "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n",
        "data: {\"error\":{\"message\":\"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.\",\"type\":null,\"param\":\"prompt\",\"code\":\"content_filter\",\"status\":400}}\n\n",
    );
    match run(Provider::Azure, body.as_bytes()) {
        StreamOutcome::MidStream {
            cause,
            content_delivered: false,
            ..
        } => assert_eq!(cause, Cause::InvalidRequest),
        other => panic!("{other:?}"),
    }
}
