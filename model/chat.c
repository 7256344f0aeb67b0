/* chat: messages -> prompt segments through a chat template (chat.h). */
#include "model/chat.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/file.h"
#include "common/json.h"
#include "common/utf8.h"

struct chat_template {
    char *name;
    jinja_template *jinja;
};

typedef struct builtin_template {
    const char *name;
    const char *family; /* the model whose template this is a copy of */
    const char *text;
} builtin_template;

/* Byte-identical copies of tests/data/reference/chat-templates/FAMILY.jinja
 * (test-chat checks it), plus the classic ChatML template. */
static const builtin_template builtins[] = {
    {"chatml", "ChatML",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message"
     "['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|im_start|>assistant\\n' }}{% endif %}"},
    {"llama2", "Llama-2-7b-chat",
     "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{%"
     " set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = "
     "messages %}{% set system_message = false %}{% endif %}{% for message in loop_mes"
     "sages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_e"
     "xception('Conversation roles must alternate user/assistant/user/assistant/...') "
     "}}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content"
     " = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% els"
     "e %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'u"
     "ser' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message"
     "['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif"
     " %}{% endfor %}"},
    {"llama3", "Meta-Llama-3-8B-Instruct",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set conte"
     "nt = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n"
     "\n"
     "'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set co"
     "ntent = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_gene"
     "ration_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "' }}{% endif %}"},
    {"llama3.1", "Llama-3.1-8B-Instruct",
     "{{- bos_token }}\n"
     "{%- if custom_tools is defined %}\n"
     "    {%- set tools = custom_tools %}\n"
     "{%- endif %}\n"
     "{%- if not tools_in_user_message is defined %}\n"
     "    {%- set tools_in_user_message = true %}\n"
     "{%- endif %}\n"
     "{%- if not date_string is defined %}\n"
     "    {%- set date_string = \"26 Jul 2024\" %}\n"
     "{%- endif %}\n"
     "{%- if not tools is defined %}\n"
     "    {%- set tools = none %}\n"
     "{%- endif %}\n"
     "\n"
     "{#- This block extracts the system message, so we can slot it into the right pla"
     "ce. #}\n"
     "{%- if messages[0]['role'] == 'system' %}\n"
     "    {%- set system_message = messages[0]['content']|trim %}\n"
     "    {%- set messages = messages[1:] %}\n"
     "{%- else %}\n"
     "    {%- set system_message = \"\" %}\n"
     "{%- endif %}\n"
     "\n"
     "{#- System message + builtin tools #}\n"
     "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
     "{%- if builtin_tools is defined or tools is not none %}\n"
     "    {{- \"Environment: ipython\\n\" }}\n"
     "{%- endif %}\n"
     "{%- if builtin_tools is defined %}\n"
     "    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') | join"
     "(\", \") + \"\\n\\n\"}}\n"
     "{%- endif %}\n"
     "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
     "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
     "{%- if tools is not none and not tools_in_user_message %}\n"
     "    {{- \"You have access to the following functions. To call a function, please "
     "respond with JSON for a function call.\" }}\n"
     "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary "
     "of argument name and its value}.' }}\n"
     "    {{- \"Do not use variables.\\n\\n\" }}\n"
     "    {%- for t in tools %}\n"
     "        {{- t | tojson(indent=4) }}\n"
     "        {{- \"\\n\\n\" }}\n"
     "    {%- endfor %}\n"
     "{%- endif %}\n"
     "{{- system_message }}\n"
     "{{- \"<|eot_id|>\" }}\n"
     "\n"
     "{#- Custom tools are passed in a user message with some extra guidance #}\n"
     "{%- if tools_in_user_message and not tools is none %}\n"
     "    {#- Extract the first user message so we can plug it in here #}\n"
     "    {%- if messages | length != 0 %}\n"
     "        {%- set first_user_message = messages[0]['content']|trim %}\n"
     "        {%- set messages = messages[1:] %}\n"
     "    {%- else %}\n"
     "        {{- raise_exception(\"Cannot put tools in the first user message when the"
     "re's no first user message!\") }}\n"
     "{%- endif %}\n"
     "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
     "    {{- \"Given the following functions, please respond with a JSON for a functio"
     "n call \" }}\n"
     "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
     "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary "
     "of argument name and its value}.' }}\n"
     "    {{- \"Do not use variables.\\n\\n\" }}\n"
     "    {%- for t in tools %}\n"
     "        {{- t | tojson(indent=4) }}\n"
     "        {{- \"\\n\\n\" }}\n"
     "    {%- endfor %}\n"
     "    {{- first_user_message + \"<|eot_id|>\"}}\n"
     "{%- endif %}\n"
     "\n"
     "{%- for message in messages %}\n"
     "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_cal"
     "ls' in message) %}\n"
     "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ m"
     "essage['content'] | trim + '<|eot_id|>' }}\n"
     "    {%- elif 'tool_calls' in message %}\n"
     "        {%- if not message.tool_calls|length == 1 %}\n"
     "            {{- raise_exception(\"This model only supports single tool-calls at o"
     "nce!\") }}\n"
     "        {%- endif %}\n"
     "        {%- set tool_call = message.tool_calls[0].function %}\n"
     "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
     "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
     "            {{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\n"
     "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
     "                {{- arg_name + '=\"' + arg_val + '\"' }}\n"
     "                {%- if not loop.last %}\n"
     "                    {{- \", \" }}\n"
     "                {%- endif %}\n"
     "                {%- endfor %}\n"
     "            {{- \")\" }}\n"
     "        {%- else  %}\n"
     "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
     "            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
     "            {{- '\"parameters\": ' }}\n"
     "            {{- tool_call.arguments | tojson }}\n"
     "            {{- \"}\" }}\n"
     "        {%- endif %}\n"
     "        {%- if builtin_tools is defined %}\n"
     "            {#- This means we're in ipython mode #}\n"
     "            {{- \"<|eom_id|>\" }}\n"
     "        {%- else %}\n"
     "            {{- \"<|eot_id|>\" }}\n"
     "        {%- endif %}\n"
     "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
     "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
     "        {%- if message.content is mapping or message.content is iterable %}\n"
     "            {{- message.content | tojson }}\n"
     "        {%- else %}\n"
     "            {{- message.content }}\n"
     "        {%- endif %}\n"
     "        {{- \"<|eot_id|>\" }}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"
     "{%- if add_generation_prompt %}\n"
     "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
     "{%- endif %}\n"},
    {"mistral-v0.3", "Mistral-7B-Instruct-v0.3",
     "{%- if messages[0]['role'] == 'system' %}\n"
     "    {%- set system_message = messages[0]['content'] %}\n"
     "    {%- set loop_messages = messages[1:] %}\n"
     "{%- else %}\n"
     "    {%- set loop_messages = messages %}\n"
     "{%- endif %}\n"
     "\n"
     "{{- bos_token }}\n"
     "{%- for message in loop_messages %}\n"
     "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
     "        {{- raise_exception('After the optional system message, conversation rol"
     "es must alternate user/assistant/user/assistant/...') }}\n"
     "    {%- endif %}\n"
     "    {%- if message['role'] == 'user' %}\n"
     "        {%- if loop.last and system_message is defined %}\n"
     "            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/IN"
     "ST]' }}\n"
     "        {%- else %}\n"
     "            {{- '[INST] ' + message['content'] + '[/INST]' }}\n"
     "        {%- endif %}\n"
     "    {%- elif message['role'] == 'assistant' %}\n"
     "        {{- ' ' + message['content'] + eos_token}}\n"
     "    {%- else %}\n"
     "        {{- raise_exception('Only user and assistant roles are supported, with t"
     "he exception of an initial optional system message!') }}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"},
    {"phi3", "Phi-3-mini-4k-instruct",
     "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n"
     "' + message['content'] + '<|end|>\n"
     "'}}{% elif message['role'] == 'user' %}{{'<|user|>\n"
     "' + message['content'] + '<|end|>\n"
     "'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n"
     "' + message['content'] + '<|end|>\n"
     "'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n"
     "' }}{% else %}{{ eos_token }}{% endif %}"},
    {"qwen2.5", "Qwen2.5-7B-Instruct",
     "{%- if tools %}\n"
     "    {{- '<|im_start|>system\\n' }}\n"
     "    {%- if messages[0]['role'] == 'system' %}\n"
     "        {{- messages[0]['content'] }}\n"
     "    {%- else %}\n"
     "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant"
     ".' }}\n"
     "    {%- endif %}\n"
     "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the us"
     "er query.\\n\\nYou are provided with function signatures within <tools></tools> XM"
     "L tags:\\n<tools>\" }}\n"
     "    {%- for tool in tools %}\n"
     "        {{- \"\\n\" }}\n"
     "        {{- tool | tojson }}\n"
     "    {%- endfor %}\n"
     "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with functio"
     "n name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"n"
     "ame\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end"
     "|>\\n\" }}\n"
     "{%- else %}\n"
     "    {%- if messages[0]['role'] == 'system' %}\n"
     "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
     "    {%- else %}\n"
     "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are"
     " a helpful assistant.<|im_end|>\\n' }}\n"
     "    {%- endif %}\n"
     "{%- endif %}\n"
     "{%- for message in messages %}\n"
     "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.fi"
     "rst) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
     "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>"
     "' + '\\n' }}\n"
     "    {%- elif message.role == \"assistant\" %}\n"
     "        {{- '<|im_start|>' + message.role }}\n"
     "        {%- if message.content %}\n"
     "            {{- '\\n' + message.content }}\n"
     "        {%- endif %}\n"
     "        {%- for tool_call in message.tool_calls %}\n"
     "            {%- if tool_call.function is defined %}\n"
     "                {%- set tool_call = tool_call.function %}\n"
     "            {%- endif %}\n"
     "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
     "            {{- tool_call.name }}\n"
     "            {{- '\", \"arguments\": ' }}\n"
     "            {{- tool_call.arguments | tojson }}\n"
     "            {{- '}\\n</tool_call>' }}\n"
     "        {%- endfor %}\n"
     "        {{- '<|im_end|>\\n' }}\n"
     "    {%- elif message.role == \"tool\" %}\n"
     "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") "
     "%}\n"
     "            {{- '<|im_start|>user' }}\n"
     "        {%- endif %}\n"
     "        {{- '\\n<tool_response>\\n' }}\n"
     "        {{- message.content }}\n"
     "        {{- '\\n</tool_response>' }}\n"
     "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
     "            {{- '<|im_end|>\\n' }}\n"
     "        {%- endif %}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"
     "{%- if add_generation_prompt %}\n"
     "    {{- '<|im_start|>assistant\\n' }}\n"
     "{%- endif %}\n"},
    {"qwen3", "Qwen3",
     "{%- if tools %}\n"
     "    {{- '<|im_start|>system\\n' }}\n"
     "    {%- if messages[0].role == 'system' %}\n"
     "        {{- messages[0].content + '\\n\\n' }}\n"
     "    {%- endif %}\n"
     "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user q"
     "uery.\\n\\nYou are provided with function signatures within <tools></tools> XML ta"
     "gs:\\n<tools>\" }}\n"
     "    {%- for tool in tools %}\n"
     "        {{- \"\\n\" }}\n"
     "        {{- tool | tojson }}\n"
     "    {%- endfor %}\n"
     "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with functio"
     "n name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"n"
     "ame\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end"
     "|>\\n\" }}\n"
     "{%- else %}\n"
     "    {%- if messages[0].role == 'system' %}\n"
     "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
     "    {%- endif %}\n"
     "{%- endif %}\n"
     "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - "
     "1) %}\n"
     "{%- for message in messages[::-1] %}\n"
     "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
     "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content"
     ".startswith('<tool_response>') and message.content.endswith('</tool_response>'))"
     " %}\n"
     "        {%- set ns.multi_step_tool = false %}\n"
     "        {%- set ns.last_query_index = index %}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"
     "{%- for message in messages %}\n"
     "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.fi"
     "rst) %}\n"
     "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>"
     "' + '\\n' }}\n"
     "    {%- elif message.role == \"assistant\" %}\n"
     "        {%- set content = message.content %}\n"
     "        {%- set reasoning_content = '' %}\n"
     "        {%- if message.reasoning_content is defined and message.reasoning_conten"
     "t is not none %}\n"
     "            {%- set reasoning_content = message.reasoning_content %}\n"
     "        {%- else %}\n"
     "            {%- if '</think>' in message.content %}\n"
     "                {%- set content = message.content.split('</think>')[-1].lstrip('"
     "\\n') %}\n"
     "                {%- set reasoning_content = message.content.split('</think>')[0]"
     ".rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
     "            {%- endif %}\n"
     "        {%- endif %}\n"
     "        {%- if loop.index0 > ns.last_query_index %}\n"
     "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
     "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_co"
     "ntent.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
     "            {%- else %}\n"
     "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
     "            {%- endif %}\n"
     "        {%- else %}\n"
     "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
     "        {%- endif %}\n"
     "        {%- if message.tool_calls %}\n"
     "            {%- for tool_call in message.tool_calls %}\n"
     "                {%- if (loop.first and content) or (not loop.first) %}\n"
     "                    {{- '\\n' }}\n"
     "                {%- endif %}\n"
     "                {%- if tool_call.function %}\n"
     "                    {%- set tool_call = tool_call.function %}\n"
     "                {%- endif %}\n"
     "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
     "                {{- tool_call.name }}\n"
     "                {{- '\", \"arguments\": ' }}\n"
     "                {%- if tool_call.arguments is string %}\n"
     "                    {{- tool_call.arguments }}\n"
     "                {%- else %}\n"
     "                    {{- tool_call.arguments | tojson }}\n"
     "                {%- endif %}\n"
     "                {{- '}\\n</tool_call>' }}\n"
     "            {%- endfor %}\n"
     "        {%- endif %}\n"
     "        {{- '<|im_end|>\\n' }}\n"
     "    {%- elif message.role == \"tool\" %}\n"
     "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
     "            {{- '<|im_start|>user' }}\n"
     "        {%- endif %}\n"
     "        {{- '\\n<tool_response>\\n' }}\n"
     "        {{- message.content }}\n"
     "        {{- '\\n</tool_response>' }}\n"
     "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
     "            {{- '<|im_end|>\\n' }}\n"
     "        {%- endif %}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"
     "{%- if add_generation_prompt %}\n"
     "    {{- '<|im_start|>assistant\\n' }}\n"
     "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
     "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
     "    {%- endif %}\n"
     "{%- endif %}"},
};

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

int chat_builtin(const char *name, const char **text, size_t *len)
{
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i].name, name) == 0) {
            *text = builtins[i].text;
            *len = strlen(builtins[i].text);
            return 0;
        }
    return -1;
}

const char *chat_builtin_names(void)
{
    return "chatml, llama2, llama3, llama3.1, mistral-v0.3, phi3, qwen2.5, qwen3";
}

int chat_template_parse(chat_template **out, const char *name, const char *text, size_t len,
                        llmq_err *err)
{
    *out = NULL;
    chat_template *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name))) {
        free(t);
        return llmq_errf(err, "chat template %s: out of memory", name);
    }
    if (jinja_parse(&t->jinja, text, len, err) < 0) {
        chat_template_free(t);
        return llmq_err_prefix(err, "chat template %s", name);
    }
    *out = t;
    return 0;
}

int chat_model_template(const gguf_file *model, gguf_str *out, llmq_err *err)
{
    return gguf_get_str(model, CHAT_TEMPLATE_KEY, out, err);
}

static int open_model_template(chat_template **out, const gguf_file *model, llmq_err *err)
{
    gguf_str s;
    int rc = model ? chat_model_template(model, &s, err) : 1;
    if (rc < 0)
        return -1;
    if (rc == 1)
        return llmq_errf(err, "%s has no %s: pass --chat-template NAME|FILE (NAME: %s)",
                         model ? gguf_path(model) : "no model given", CHAT_TEMPLATE_KEY,
                         chat_builtin_names());
    return chat_template_parse(out, CHAT_TEMPLATE_KEY, s.ptr, s.len, err);
}

int chat_template_open(chat_template **out, const char *choice, const gguf_file *model,
                       llmq_err *err)
{
    *out = NULL;
    if (!choice || !*choice)
        return open_model_template(out, model, err);
    const char *text;
    size_t len;
    if (chat_builtin(choice, &text, &len) == 0)
        return chat_template_parse(out, choice, text, len, err);
    char *file;
    if (file_read_all(choice, &file, &len, err) < 0)
        return llmq_err_prefix(err, "--chat-template %s: not a built-in name (%s), and", choice,
                               chat_builtin_names());
    int rc = chat_template_parse(out, choice, file, len, err);
    free(file);
    return rc;
}

const char *chat_template_name(const chat_template *t)
{
    return t->name;
}

void chat_template_free(chat_template *t)
{
    if (!t)
        return;
    jinja_free(t->jinja);
    free(t->name);
    free(t);
}

/* messages as the JSON value the template reads: [{"role", "content"}...].
 * Strings point at the caller's bytes, which jinja only reads. */
typedef struct messages_json {
    json_value array;
    json_value *items;
    json_member *members;
} messages_json;

static int check_utf8(const char *s, size_t len, size_t i, const char *field, llmq_err *err)
{
    size_t ok = utf8_valid_prefix(s, len);
    if (ok < len)
        return llmq_errf(err, "messages[%zu].%s: invalid UTF-8 at byte %zu", i, field, ok);
    return 0;
}

static int messages_to_json(const chat_message *m, size_t n, messages_json *j, llmq_err *err)
{
    j->items = calloc(n ? n : 1, sizeof *j->items);
    j->members = calloc(n ? 2 * n : 1, sizeof *j->members);
    if (!j->items || !j->members)
        return llmq_errf(err, "out of memory for %zu messages", n);
    for (size_t i = 0; i < n; i++) {
        if (check_utf8(m[i].role, m[i].role_len, i, "role", err) < 0 ||
            check_utf8(m[i].content, m[i].content_len, i, "content", err) < 0)
            return -1;
        json_member *mm = &j->members[2 * i];
        mm[0] = (json_member){"role", 4, {.type = JSON_STRING}};
        mm[0].value.str.s = (char *)m[i].role;
        mm[0].value.str.len = m[i].role_len;
        mm[1] = (json_member){"content", 7, {.type = JSON_STRING}};
        mm[1].value.str.s = (char *)m[i].content;
        mm[1].value.str.len = m[i].content_len;
        j->items[i] = (json_value){.type = JSON_OBJECT};
        j->items[i].obj.members = mm;
        j->items[i].obj.n = 2;
    }
    j->array = (json_value){.type = JSON_ARRAY};
    j->array.arr.items = j->items;
    j->array.arr.n = n;
    return 0;
}

static json_value string_value(const char *s)
{
    json_value v = {.type = JSON_STRING};
    v.str.s = (char *)s;
    v.str.len = strlen(s);
    return v;
}

int chat_render(const chat_template *t, const chat_message *messages, size_t n,
                const chat_vars *vars, chat_prompt *out, llmq_err *err)
{
    memset(out, 0, sizeof *out);
    messages_json mj = {0};
    int rc = messages_to_json(messages, n, &mj, err);
    if (rc == 0) {
        json_value gen = {.type = JSON_BOOL, .boolean = vars->add_generation_prompt};
        json_value none = {.type = JSON_NULL};
        json_value bos = vars->bos_token ? string_value(vars->bos_token) : none;
        json_value eos = vars->eos_token ? string_value(vars->eos_token) : none;
        jinja_var v[6] = {
            {"messages", &mj.array, true},
            {"add_generation_prompt", &gen, false},
            {"tools", &none, false},
            {"documents", &none, false},
        };
        size_t nv = 4;
        /* a token the tokenizer does not define is not passed at all */
        if (vars->bos_token)
            v[nv++] = (jinja_var){"bos_token", &bos, false};
        if (vars->eos_token)
            v[nv++] = (jinja_var){"eos_token", &eos, false};
        jinja_env env = {v, nv, vars->now, JINJA_DEFAULT_LIMITS};
        rc = jinja_render(t->jinja, &env, out, err);
        if (rc < 0)
            llmq_err_prefix(err, "chat template %s", t->name);
    }
    free(mj.items);
    free(mj.members);
    return rc;
}

void chat_prompt_free(chat_prompt *p)
{
    jinja_output_free(p);
}

/* The text of token id as a NUL-terminated copy in *out; NULL when the
 * vocabulary has no such token. */
static int token_text(const tok_vocab *v, int32_t id, char **out, llmq_err *err)
{
    size_t len;
    const char *text = id == TOK_NONE ? NULL : tok_text(v, id, &len);
    *out = NULL;
    if (!text)
        return 0;
    if (!(*out = strndup(text, len)))
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for a token's text");
    return 0;
}

int chat_render_for(const chat_template *t, const tok_vocab *v, const chat_message *messages,
                    size_t n, chat_prompt *out, llmq_err *err)
{
    chat_vars vars = {.add_generation_prompt = true, .now = clock_wall_ms() / 1000};
    char *bos = NULL, *eos = NULL;
    memset(out, 0, sizeof *out);
    int rc = token_text(v, tok_bos(v), &bos, err);
    if (rc == 0)
        rc = token_text(v, tok_eos(v), &eos, err);
    vars.bos_token = bos;
    vars.eos_token = eos;
    if (rc == 0)
        rc = chat_render(t, messages, n, &vars, out, err);
    free(bos);
    free(eos);
    return rc;
}

int chat_tokenize(const chat_prompt *p, const tok_vocab *v, int32_t **ids, size_t *n, llmq_err *err)
{
    tok_segment *segs = malloc((p->n_segments ? p->n_segments : 1) * sizeof *segs);
    if (!segs)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for %zu segments", p->n_segments);
    for (size_t i = 0; i < p->n_segments; i++)
        segs[i] = (tok_segment){p->segments[i].len, !p->segments[i].from_content};
    int rc = tok_encode_segments(v, p->text, p->len, segs, p->n_segments, false, ids, n, err);
    free(segs);
    return rc;
}
